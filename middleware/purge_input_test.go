package middleware_test

// What Tag, Purge and the purge handler (purge.go) refuse: bad input is a
// clear error or 4xx that purges nothing, and a purge Redis cannot take is
// ErrUnavailable, or a 503.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// Tag outside a cached run, or with a key no header could carry, is a
// clear error; Purge with a nil cache or an empty key too.
func TestTagAndPurgeRejectBadInput(t *testing.T) {
	if err := middleware.Tag(context.Background(), "a"); !errors.Is(err, middleware.ErrNotTagged) {
		t.Errorf("Tag outside a run: %v, want ErrNotTagged", err)
	}
	var tagErr error
	var once sync.Once
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { tagErr = middleware.Tag(r.Context(), "a b") })
		if err := middleware.Tag(r.Context(), "ok"); err != nil {
			t.Error(err)
		}
		fmt.Fprint(w, "body")
	}))
	get(t, srv.URL+"/x", nil)
	if !errors.Is(tagErr, cache.ErrInvalidTag) {
		t.Errorf("Tag(a b): %v, want ErrInvalidTag", tagErr)
	}
	if err := middleware.Purge(t.Context(), nil, "a"); err == nil {
		t.Error("Purge with a nil cache: no error")
	}
	if err := middleware.Purge(t.Context(), c, ""); !errors.Is(err, cache.ErrInvalidTag) {
		t.Errorf("Purge(\"\"): %v, want ErrInvalidTag", err)
	}
	if err := middleware.Purge(t.Context(), c); err != nil {
		t.Errorf("Purge of no keys: %v", err)
	}
}

// The purge handler answers bad input with a clear 4xx, never a panic, and
// purges nothing then.
func TestPurgeHandlerRejectsBadInput(t *testing.T) {
	c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour})
	mux := http.NewServeMux()
	mux.Handle("/purge", middleware.PurgeHandler(c))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jsonType := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct {
		name   string
		method string
		hdr    map[string]string
		body   string
		want   int
	}{
		{name: "GET", method: http.MethodGet, hdr: map[string]string{"Surrogate-Key": "a"}, want: http.StatusMethodNotAllowed},
		{name: "DELETE", method: http.MethodDelete, hdr: map[string]string{"Surrogate-Key": "a"}, want: http.StatusMethodNotAllowed},
		{name: "no keys", method: "PURGE", want: http.StatusBadRequest},
		{name: "blank Surrogate-Key", method: "PURGE", hdr: map[string]string{"Surrogate-Key": "  "}, want: http.StatusBadRequest},
		{name: "empty Cache-Tags", method: "PURGE", hdr: map[string]string{"Cache-Tag": ", ,"}, want: http.StatusBadRequest},
		{name: "broken JSON", method: http.MethodPost, hdr: jsonType, body: `{"tags": [`, want: http.StatusBadRequest},
		{name: "JSON of another shape", method: http.MethodPost, hdr: jsonType, body: `{"tags": "a"}`, want: http.StatusBadRequest},
		{name: "JSON without tags", method: http.MethodPost, hdr: jsonType, body: `{}`, want: http.StatusBadRequest},
		{name: "JSON empty key", method: http.MethodPost, hdr: jsonType, body: `{"tags": ["a", ""]}`, want: http.StatusBadRequest},
		{name: "JSON key with a space", method: http.MethodPost, hdr: jsonType, body: `{"tags": ["a b"]}`, want: http.StatusBadRequest},
		{name: "body of another type", method: http.MethodPost, hdr: map[string]string{"Content-Type": "text/plain"}, body: "a b", want: http.StatusUnsupportedMediaType},
		{name: "body without a type", method: "PURGE", body: `{"tags": ["a"]}`, want: http.StatusUnsupportedMediaType},
		{name: "body over 1 MiB", method: http.MethodPost, hdr: jsonType, body: `{"tags": ["` + strings.Repeat("a", 1<<20) + `"]}`, want: http.StatusRequestEntityTooLarge},
		{name: "header and JSON", method: http.MethodPost, hdr: map[string]string{"Content-Type": "application/json; charset=utf-8", "Surrogate-Key": "a b"}, body: `{"tags": ["c"]}`, want: http.StatusOK},
		{name: "many keys", method: "PURGE", hdr: map[string]string{"Surrogate-Key": strings.Repeat("k ", 500)}, want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := purgeReq(t, srv.URL, tc.method, tc.hdr, tc.body)
			if rep.status != tc.want {
				t.Fatalf("%d %q, want %d", rep.status, rep.body, tc.want)
			}
			if tc.want == http.StatusMethodNotAllowed && rep.header.Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
	t.Run("nil cache", func(t *testing.T) {
		nilSrv := httptest.NewServer(middleware.PurgeHandler(nil))
		t.Cleanup(nilSrv.Close)
		if rep := purgeReq(t, nilSrv.URL, middleware.MethodPurge, map[string]string{"Surrogate-Key": "a"}, ""); rep.status != http.StatusServiceUnavailable {
			t.Fatalf("%d, want 503", rep.status)
		}
	})
}

// A purge Redis cannot take is not guaranteed: Purge says so with
// cache.ErrUnavailable, the purge handler with a 503.
func TestPurgeWithoutRedisIsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusingAddr(t), MaxRetries: -1}) // connections refused
	t.Cleanup(func() { _ = rdb.Close() })
	c := newResponses(t, rdb, cache.Options{TTL: time.Hour})
	if err := middleware.Purge(t.Context(), c, "a"); !errors.Is(err, cache.ErrUnavailable) {
		t.Errorf("Purge: %v, want ErrUnavailable", err)
	}
	srv := httptest.NewServer(middleware.PurgeHandler(c))
	t.Cleanup(srv.Close)
	if rep := purgeReq(t, srv.URL, middleware.MethodPurge, map[string]string{"Surrogate-Key": "a"}, ""); rep.status != http.StatusServiceUnavailable {
		t.Fatalf("%d, want 503", rep.status)
	}
}
