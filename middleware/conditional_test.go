package middleware_test

// Conditional and range requests answered from the stored full response
// (conditional.go's write): the ETag the middleware adds or the handler's
// own, If-None-Match, and RFC 9110's other validators and ranges.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

func TestETagAndNotModified(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	first := get(t, srv.URL+"/e", nil)
	etag := first.header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, "W/") {
		t.Fatalf("no strong ETag: %q", etag)
	}
	r := get(t, srv.URL+"/e", map[string]string{"If-None-Match": `"other", ` + etag})
	if r.status != http.StatusNotModified || r.body != "" || r.header.Get("ETag") != etag {
		t.Fatalf("304 expected: %d %q %v", r.status, r.body, r.header)
	}
	if r := get(t, srv.URL+"/e", map[string]string{"If-None-Match": `"other"`}); r.status != http.StatusOK || r.body != first.body {
		t.Fatalf("non-matching If-None-Match: %d", r.status)
	}
	// A handler's own ETag is kept.
	h2 := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("ETag", `"v7"`)
		fmt.Fprint(w, "body")
	}}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h2)
	if r := get(t, srv2.URL+"/e", nil); r.header.Get("ETag") != `"v7"` {
		t.Fatalf("handler ETag replaced: %q", r.header.Get("ETag"))
	}
	if r := get(t, srv2.URL+"/e", map[string]string{"If-None-Match": `W/"v7"`}); r.status != http.StatusNotModified {
		t.Fatalf("weak match: %d", r.status)
	}
}

// RFC 9110 §13, §14: each request's own conditional and Range headers are
// answered from the stored full response.
func TestConditionalRequestsAnsweredFromTheStore(t *testing.T) {
	const body = "0123456789abcdefghij"
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Fri, 02 Jan 2026 03:04:05 GMT")
		fmt.Fprint(w, body)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	get(t, srv.URL+"/r", nil)
	cases := []struct {
		hdr    map[string]string
		status int
		body   string
	}{
		{nil, 200, body},
		{map[string]string{"If-None-Match": `"v1"`}, 304, ""},
		{map[string]string{"If-None-Match": `"v0"`}, 200, body},
		{map[string]string{"If-Modified-Since": "Fri, 02 Jan 2026 03:04:05 GMT"}, 304, ""},
		{map[string]string{"If-Modified-Since": "Thu, 01 Jan 2026 00:00:00 GMT"}, 200, body},
		{map[string]string{"Range": "bytes=5-9"}, 206, "56789"},
		{map[string]string{"Range": "bytes=-3"}, 206, "hij"},
		{map[string]string{"Range": "bytes=5-9", "If-Range": `"v1"`}, 206, "56789"},
		{map[string]string{"Range": "bytes=5-9", "If-Range": `"v0"`}, 200, body},
		{map[string]string{"Range": "bytes=50-60"}, 416, ""},
		{map[string]string{"If-Match": `"v0"`}, 412, ""},
		{map[string]string{"If-Match": `"v1"`}, 200, body},
	}
	for _, tc := range cases {
		r := get(t, srv.URL+"/r", tc.hdr)
		if r.status != tc.status || (tc.body != "" && r.body != tc.body) || (tc.status == 304 && r.body != "") {
			t.Errorf("%v: %d %q, want %d %q", tc.hdr, r.status, r.body, tc.status, tc.body)
		}
		if r.header.Get("X-Cache") != "HIT" {
			t.Errorf("%v: %s", tc.hdr, r.header.Get("X-Cache"))
		}
	}
	if h.runs.Load() != 1 {
		t.Errorf("%d handler runs", h.runs.Load())
	}
}
