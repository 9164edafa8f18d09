package middleware_test

import (
	"bytes"
	"fmt"
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
