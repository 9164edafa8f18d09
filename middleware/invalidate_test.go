package middleware_test

// RFC 9111 §4.4 (invalidate.go): a successful unsafe request invalidates
// the stored responses of its URL, its Location and its Content-Location,
// on every replica.

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// RFC 9111 §4.4: a successful unsafe request invalidates the stored
// responses of its URL, and of its Location and Content-Location on the
// same host, on every replica; a failed one does not.
func TestUnsafeMethodsInvalidate(t *testing.T) {
	ns := redistest.Prefix(t)
	var version atomic.Int32
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("Vary", "Accept-Language")
			fmt.Fprintf(w, "%s v%d %s", r.URL.Path, version.Load(), r.Header.Get("Accept-Language"))
		case http.MethodPost:
			if r.Header.Get("X-Fail") != "" {
				http.Error(w, "rejected", http.StatusConflict)
				return
			}
			version.Add(1)
			w.Header().Set("Location", r.Header.Get("X-Loc"))
			w.Header().Set("Content-Location", r.Header.Get("X-Cloc"))
			w.WriteHeader(http.StatusCreated)
		default:
			version.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}
	}}
	var urls []string
	for range 2 {
		urls = append(urls, serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h).URL)
	}
	en, fr := map[string]string{"Accept-Language": "en"}, map[string]string{"Accept-Language": "fr"}
	fill := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			for _, lang := range []map[string]string{en, fr} {
				get(t, urls[0]+p, lang)
				if r := get(t, urls[1]+p, lang); r.header.Get("X-Cache") != "HIT" {
					t.Fatalf("%s %v not stored: %s", p, lang, r.header.Get("X-Cache"))
				}
			}
		}
	}
	expect := func(path, status string) {
		t.Helper()
		for _, lang := range []map[string]string{en, fr} {
			r := get(t, urls[0]+path, lang)
			if r.header.Get("X-Cache") != status {
				t.Errorf("%s %v after the write: %s %q, want %s", path, lang, r.header.Get("X-Cache"), r.body, status)
			}
		}
	}
	fill("/items/1")
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if r := do(t, m, urls[1]+"/items/1", nil); r.status != http.StatusNoContent || r.header.Get("X-Cache") != "BYPASS" {
			t.Fatalf("%s: %d %s", m, r.status, r.header.Get("X-Cache"))
		}
		expect("/items/1", "MISS")
		fill("/items/1")
	}
	// A POST names other URLs of this host; another host's are left alone.
	fill("/items", "/items/2", "/items/3", "/items/4")
	do(t, http.MethodPost, urls[1]+"/items", map[string]string{"X-Loc": "/items/2", "X-Cloc": "http://" + host + "/items/3"})
	expect("/items", "MISS")
	expect("/items/2", "MISS")
	expect("/items/3", "MISS")
	expect("/items/4", "HIT")
	fill("/items", "/items/2")
	do(t, http.MethodPost, urls[1]+"/items", map[string]string{"X-Loc": "http://elsewhere.example/items/2"})
	expect("/items/2", "HIT")
	// A failed write invalidates nothing.
	fill("/items")
	if r := do(t, http.MethodPost, urls[1]+"/items", map[string]string{"X-Fail": "1"}); r.status != http.StatusConflict {
		t.Fatalf("failed POST: %d", r.status)
	}
	expect("/items", "HIT")
}

// Options.Invalidates restricts which unsafe requests invalidate: here
// only a 2xx, so an anonymous POST the handler redirects to its login page
// costs no handler run of the entry's readers.
func TestInvalidatesDecidesWhichUnsafeRequestsInvalidate(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		switch {
		case r.Method == http.MethodGet:
			fmt.Fprintf(w, "page %d", n)
		case r.Header.Get("Authorization") == "":
			http.Redirect(w, r, "/login", http.StatusFound)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}}
	only2xx := func(_ *http.Request, status int) bool { return status >= 200 && status < 300 }
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{Invalidates: only2xx}, h)
	get(t, srv.URL+"/doc", nil)
	for range 5 {
		do(t, http.MethodPost, srv.URL+"/doc", nil) // 302 to /login
	}
	if r := get(t, srv.URL+"/doc", nil); r.header.Get("X-Cache") != "HIT" || r.body != "page 1" {
		t.Fatalf("after anonymous POSTs: %s %q, want the stored page", r.header.Get("X-Cache"), r.body)
	}
	do(t, http.MethodPost, srv.URL+"/doc", map[string]string{"Authorization": "Bearer editor"})
	if r := get(t, srv.URL+"/doc", nil); r.header.Get("X-Cache") != "MISS" {
		t.Fatalf("after an editor's POST: %s %q, want a MISS", r.header.Get("X-Cache"), r.body)
	}
}
