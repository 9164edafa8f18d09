package middleware_test

// Requests with credentials: with CacheAuthorized each credential has its
// entries, so a response made for one never answers another credential or
// an anonymous request (RFC 9111 §3.5); and neither a credential nor a
// cookie the key holds reaches a Redis key name or a log line.

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/internal/syncbuf"
	"github.com/stampede-go/stampede/middleware"
)

// protected answers 401 to an anonymous request and the data of the
// request's credential otherwise.
func protected(w http.ResponseWriter, r *http.Request, n int32) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		http.Error(w, "login first", http.StatusUnauthorized)
		return
	}
	fmt.Fprintf(w, "data of %s", strings.TrimPrefix(auth, "Bearer "))
}

func TestAuthorizedResponsesAnswerOnlyTheirCredential(t *testing.T) {
	h := &counting{write: protected}
	ns := redistest.Prefix(t)
	opts := middleware.Options{CacheAuthorized: true}
	s1 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), opts, h)
	s2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), opts, h)
	steps := []struct {
		srv, auth string
		status    int
		body      string
		cached    string
	}{
		{s1.URL, "Bearer alice", 200, "data of alice", "MISS"},
		{s2.URL, "", 401, "login first\n", "MISS"},
		{s1.URL, "", 401, "login first\n", "MISS"},
		{s2.URL, "Bearer bob", 200, "data of bob", "MISS"},
		{s2.URL, "Bearer alice", 200, "data of alice", "HIT"},
		{s1.URL, "Bearer bob", 200, "data of bob", "HIT"},
	}
	for i, s := range steps {
		hdr := map[string]string{}
		if s.auth != "" {
			hdr["Authorization"] = s.auth
		}
		r := get(t, s.srv+"/me", hdr)
		if r.status != s.status || r.body != s.body || r.header.Get("X-Cache") != s.cached {
			t.Errorf("step %d (%q): %d %s %q, want %d %s %q", i, s.auth, r.status, r.header.Get("X-Cache"), r.body, s.status, s.cached, s.body)
		}
	}
	// Without CacheAuthorized, a credential passes by the cache.
	s3 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h)
	if r := get(t, s3.URL+"/me", map[string]string{"Authorization": "Bearer carol"}); r.header.Get("X-Cache") != "BYPASS" {
		t.Errorf("without CacheAuthorized: %s", r.header.Get("X-Cache"))
	}
}

func TestCredentialsAndCookiesNeverReachRedisKeysOrLogs(t *testing.T) {
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rdb := redistest.Client(t)
	ns := redistest.Prefix(t)
	// Responses over the cache's MaxValueBytes are logged, key and all.
	c := newResponses(t, rdb, cache.Options{Namespace: ns, MaxValueBytes: 4096, Logger: logger})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Vary", "X-Api-Key")
		size := 10
		if r.URL.Query().Get("big") != "" {
			size = 8000
		}
		fmt.Fprintf(w, "for %s %s", r.Header.Get("Authorization"), strings.Repeat("x", size))
	}}
	srv := serve(t, c, middleware.Options{CacheAuthorized: true, VaryCookies: []string{"lang"}, Logger: logger}, h)
	for _, q := range []string{"", "?big=1"} {
		for _, hdr := range []map[string]string{
			{"Authorization": "Bearer secret-alice-token", "Cookie": "lang=secret-lang", "X-Api-Key": "secret-api-key"},
			{"Authorization": "Bearer secret-bob-token"},
		} {
			get(t, srv.URL+"/private"+q, hdr)
			get(t, srv.URL+"/private"+q, hdr)
		}
	}
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine int
	for _, k := range keys {
		if strings.Contains(k, ns) {
			mine++
		}
		if strings.Contains(k, "secret") || strings.Contains(k, "Bearer") {
			t.Errorf("Redis key %q holds a credential", k)
		}
	}
	if mine == 0 {
		t.Fatal("no key of the test's namespace in Redis: nothing was checked")
	}
	if !strings.Contains(logs.String(), "not stored") {
		t.Fatalf("no log of the response too large to store: nothing was checked:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "secret") {
		t.Errorf("a log line holds a credential:\n%s", logs.String())
	}
}
