package middleware_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// Issue 37, item 12: a process-local cache of responses (no Redis) is
// bounded by bytes, not only by entries: 150 unique URLs answered with
// 1 MiB bodies through the middleware, on a cache with MaxLocalBytes
// 32 MiB, leave at most 32 MiB of responses held (Stats().LocalBytes, and
// the entries held counted at their bodies' size), and a response held
// answers again.
func TestLocalResponsesBoundedByMaxLocalBytes(t *testing.T) {
	const body, bound, urls = 1 << 20, 32 << 20, 150
	c := newResponses(t, nil, cache.Options{MaxLocalBytes: bound})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, _ int32) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, body))
	}}
	srv := serve(t, c, middleware.Options{}, h)
	for i := range urls {
		if r := get(t, fmt.Sprintf("%s/blob/%d", srv.URL, i), nil); r.status != http.StatusOK || len(r.body) != body {
			t.Fatalf("/blob/%d: %d, %d bytes", i, r.status, len(r.body))
		}
	}
	st := c.Stats()
	t.Logf("after %d URLs of %d bytes: LocalEntries %d, LocalBytes %d (MaxLocalBytes %d)", urls, body, st.LocalEntries, st.LocalBytes, bound)
	if st.LocalBytes > bound || st.LocalEntries*body > bound {
		t.Fatalf("%d responses of %d bytes held, weighing %d, with MaxLocalBytes %d", st.LocalEntries, body, st.LocalBytes, bound)
	}
	if st.LocalEntries == 0 {
		t.Fatal("no response held")
	}
	last := fmt.Sprintf("%s/blob/%d", srv.URL, urls-1)
	if r := get(t, last, nil); r.header.Get("X-Cache") != "HIT" || len(r.body) != body {
		t.Fatalf("the last URL again: X-Cache %q, %d bytes; want a HIT of %d", r.header.Get("X-Cache"), len(r.body), body)
	}
}

// A response heavier than a sixteenth of MaxLocalBytes (what the
// process-local store holds in one entry) is treated as one over
// MaxValueBytes is with Redis: it answers its own request and is not
// stored, so the next request runs the handler again.
func TestLocalResponseOverMaxLocalBytesShare(t *testing.T) {
	const body = 3 << 20 // over 32 MiB / 16
	c := newResponses(t, nil, cache.Options{MaxLocalBytes: 32 << 20, Logger: slog.New(slog.DiscardHandler)})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, _ int32) {
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, body))
	}}
	srv := serve(t, c, middleware.Options{MaxBodyBytes: 4 << 20, Logger: slog.New(slog.DiscardHandler)}, h)
	for i := range 2 {
		r := get(t, srv.URL+"/big", nil)
		if r.status != http.StatusOK || len(r.body) != body || r.header.Get("X-Cache") != "MISS" {
			t.Fatalf("request %d: %d, %d bytes, X-Cache %q; want 200, %d bytes, MISS", i, r.status, len(r.body), r.header.Get("X-Cache"), body)
		}
	}
	if n, st := h.runs.Load(), c.Stats(); n != 2 || st.Unstored != 2 || st.LocalEntries != 0 {
		t.Fatalf("%d handler runs, Unstored %d, LocalEntries %d; want 2, 2, 0", n, st.Unstored, st.LocalEntries)
	}
}
