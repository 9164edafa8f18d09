package middleware_test

// Requests that share one handler run: a response that is not shareable
// (Set-Cookie, too large to store) reaches only its own request, and a
// conditional or range request shares a plain GET run and derives its 304
// or 206 from the full response.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// Defect 2: a response that is not shareable (Set-Cookie, too large to
// store) reaches only the request whose handler run produced it, also
// when the URL's marker and the variant are fetched by different runs.
func TestNonShareableResponsesStayWithTheirRequest(t *testing.T) {
	cases := []struct {
		name       string
		clients    int
		body       int // bytes of padding
		maxValue   int // the cache's MaxValueBytes (0: NewCache's default)
		storedPage bool
	}{
		// The page is larger than the cache stores, but under MaxBodyBytes:
		// nothing is stored, every page goes to its own client.
		{"too-large-to-store/clients=2", 2, 8000, 4096, false},
		{"too-large-to-store/clients=60", 60, 8000, 4096, false},
		// Default options, a page of 1 MiB - 100 B (the case): the
		// cookie clients' page is stored and shared; a Set-Cookie page never.
		{"defaults/1MiB-100B", 6, 1<<20 - 100, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each page names the client it was made for; cookie-less
			// clients get a session cookie naming them too.
			h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
				w.Header().Set("Vary", "Accept-Language")
				client := r.Header.Get("X-Client")
				if _, err := r.Cookie("session"); err != nil {
					http.SetCookie(w, &http.Cookie{Name: "session", Value: "for-" + client})
					client = "anonymous " + client
				}
				fmt.Fprintf(w, "page for %s|%s", client, strings.Repeat("x", tc.body))
			}}
			ns := redistest.Prefix(t)
			var urls []string
			for range 2 {
				c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns, MaxValueBytes: tc.maxValue})
				urls = append(urls, serve(t, c, middleware.Options{}, h).URL)
			}
			for round := range 3 {
				var wg sync.WaitGroup
				for i := range tc.clients {
					wg.Go(func() {
						client := fmt.Sprintf("c%d-%d", round, i)
						hdr := map[string]string{"X-Client": client, "Accept-Language": "en"}
						own := "page for anonymous " + client + "|"
						if i%2 == 1 {
							hdr["Cookie"] = "session=mine"
							own = "page for " + client + "|"
						}
						r := get(t, urls[i%2]+fmt.Sprintf("/page?r=%d", round), hdr)
						switch {
						case strings.HasPrefix(r.body, own):
						case !tc.storedPage, strings.HasPrefix(r.body, "page for anonymous "):
							// Another client's page is a stored one, and never one
							// that came with a Set-Cookie.
							t.Errorf("%s got %.40q (%s)", client, r.body, r.header.Get("X-Cache"))
						}
						if sc := r.header.Get("Set-Cookie"); sc != "" && (hdr["Cookie"] != "" || !strings.Contains(sc, "for-"+client)) {
							t.Errorf("%s (cookie %q) got Set-Cookie %q", client, hdr["Cookie"], sc)
						}
					})
				}
				waitAll(t, &wg, "the round's clients to be answered")
			}
		})
	}
}

// Defect 2: a response too large to store is not handed to the requests
// that shared its handler run: each runs its own.
func TestTooLargeToStoreIsNotShared(t *testing.T) {
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprintf(w, "for %s|%s", r.Header.Get("X-Client"), strings.Repeat("x", 8000))
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{MaxValueBytes: 4096})
	srv := serve(t, c, middleware.Options{}, h)
	for i, r := range clientsOnOneRun(t, srv.URL+"/big", 10, h.release) {
		if !strings.HasPrefix(r.body, fmt.Sprintf("for %d|", i)) {
			t.Errorf("client %d got %.20q (%s)", i, r.body, r.header.Get("X-Cache"))
		}
	}
}

// Defect 4: the shared run is a plain GET; each request's 304 or 206 is
// derived from the full response, and the run fills the cache.
func TestConditionalAndRangeRequestsShareAPlainRun(t *testing.T) {
	const body = "0123456789abcdefghij"
	var sawConditional atomic.Int32
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
		for _, name := range []string{"If-None-Match", "If-Modified-Since", "Range", "If-Range", "If-Match"} {
			if r.Header.Get(name) != "" {
				sawConditional.Add(1)
			}
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), strings.NewReader(body))
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	leaders := []map[string]string{
		{"If-None-Match": `"v1"`},
		{"Range": "bytes=0-3"},
		{"If-Modified-Since": "Fri, 02 Jan 2026 03:04:05 GMT"},
	}
	for _, leader := range leaders {
		t.Run(fmt.Sprint(leader), func(t *testing.T) {
			h.release = make(chan struct{})
			h.runs.Store(0)
			path := fmt.Sprintf("/c%d", len(leader)+len(fmt.Sprint(leader)))
			var first reply
			done := make(chan struct{})
			go func() { defer close(done); first = get(t, srv.URL+path, leader) }()
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1, 10*time.Second)
			const joiners = 5
			replies := make([]reply, joiners)
			var wg sync.WaitGroup
			for i := range joiners {
				wg.Go(func() { replies[i] = get(t, srv.URL+path, nil) })
			}
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1+joiners, 10*time.Second)
			close(h.release)
			waitAll(t, &wg, "the plain GETs to be answered")
			recv(t, done, "the leader to be answered")
			for i, r := range replies {
				if r.status != http.StatusOK || r.body != body {
					t.Errorf("plain GET %d: %d %q (%s)", i, r.status, r.body, r.header.Get("X-Cache"))
				}
			}
			switch {
			case leader["Range"] != "":
				if first.status != http.StatusPartialContent || first.body != "0123" || first.header.Get("Content-Range") != "bytes 0-3/20" {
					t.Errorf("range leader: %d %q %v", first.status, first.body, first.header)
				}
			default:
				if first.status != http.StatusNotModified || first.body != "" {
					t.Errorf("conditional leader: %d %q", first.status, first.body)
				}
			}
			if r := get(t, srv.URL+path, nil); r.header.Get("X-Cache") != "HIT" || r.body != body || h.runs.Load() != 1 {
				t.Errorf("after: %s %q, %d runs", r.header.Get("X-Cache"), r.body, h.runs.Load())
			}
		})
	}
	if n := sawConditional.Load(); n != 0 {
		t.Errorf("the shared run saw %d conditional headers", n)
	}
}
