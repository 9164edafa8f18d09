package middleware_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// validating is a handler with validators of its own: it answers a request
// carrying its ETag with a 304 (and a header of the 304's own), anything
// else with the full body; it counts each kind.
type validating struct {
	full, notModified atomic.Int32
	release           chan struct{} // when set, the 304 waits for it
	vary              string
	sawVary           atomic.Value
}

func (v *validating) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if v.vary != "" {
		w.Header().Set("Vary", v.vary)
		v.sawVary.Store(r.Header.Get(v.vary))
	}
	if r.Header.Get("If-None-Match") == `"v1"` {
		if v.release != nil {
			parked(v.release)
		}
		v.notModified.Add(1)
		w.Header().Set("X-Version", "revalidated")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	v.full.Add(1)
	w.Header().Set("ETag", `"v1"`)
	w.Header().Set("X-Version", "first")
	fmt.Fprint(w, "the full body")
}

// expired sends requests for u until one is not a HIT (the response's
// lifetime has passed) and returns it.
func expired(t *testing.T, u string, hdr map[string]string) reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := get(t, u, hdr)
		if r.header.Get("X-Cache") != "HIT" || time.Now().After(deadline) {
			return r
		}
		time.Sleep(time.Millisecond) // pacing while the clock runs out, not synchronisation
	}
}

// An expired entry that may not be served stale is revalidated on the
// request path with its validators, and the handler's 304 answers the
// request with the stored body and the 304's header fields (RFC 9111
// §4.3.3, §4.3.4); with Vary, the request's own value of the header goes
// with the validators.
func TestExpiredEntryRevalidatedOnTheRequestPath(t *testing.T) {
	for _, vary := range []string{"", "Abc"} {
		t.Run("vary="+vary, func(t *testing.T) {
			h := &validating{vary: vary}
			// The cache's TTL of 1 ms expires the Vary marker too: it is
			// re-armed, not recomputed by an unconditional run.
			c := newResponses(t, redistest.Client(t), cache.Options{TTL: time.Millisecond})
			// Kept for its StaleIfError window (not served stale: the
			// handler answers).
			srv := serve(t, c, middleware.Options{TTL: time.Millisecond, StaleIfError: time.Hour}, h)
			hdr := map[string]string{}
			if vary != "" {
				hdr[vary] = "123"
			}
			if r := get(t, srv.URL+"/doc", hdr); r.body != "the full body" || r.header.Get("X-Version") != "first" {
				t.Fatalf("first: %q %v", r.body, r.header)
			}
			r := expired(t, srv.URL+"/doc", hdr)
			if r.status != http.StatusOK || r.body != "the full body" || r.header.Get("X-Version") != "revalidated" ||
				r.header.Get("ETag") != `"v1"` || r.header.Get("X-Cache") != "MISS" {
				t.Fatalf("revalidated: %d %q %v", r.status, r.body, r.header)
			}
			if h.full.Load() != 1 || h.notModified.Load() != 1 {
				t.Fatalf("full %d, 304 %d; want 1, 1", h.full.Load(), h.notModified.Load())
			}
			if vary != "" && h.sawVary.Load() != "123" {
				t.Fatalf("the revalidation carried %s: %v", vary, h.sawVary.Load())
			}
		})
	}
}

// A stale hot route costs the origin one conditional request, whatever the
// number of clients: they share the revalidation as they share a compute.
func TestRevalidationIsSharedByConcurrentRequests(t *testing.T) {
	h := &validating{release: make(chan struct{})} // the 304 waits until every client waits
	c := newResponses(t, redistest.Client(t), cache.Options{})
	srv := serve(t, c, middleware.Options{TTL: time.Millisecond, StaleIfError: time.Hour}, h)
	get(t, srv.URL+"/doc", nil)
	// Stored before the answer left: fresh for one millisecond from then.
	for start := time.Now(); time.Since(start) < 5*time.Millisecond; {
	}
	for _, r := range clientsOnOneRun(t, srv.URL+"/doc", 20, h.release) {
		if r.status != http.StatusOK || r.body != "the full body" || r.header.Get("X-Version") != "revalidated" {
			t.Fatalf("%d %q %v", r.status, r.body, r.header)
		}
	}
	if h.full.Load() != 1 || h.notModified.Load() != 1 {
		t.Fatalf("full %d, 304 %d; want 1, 1", h.full.Load(), h.notModified.Load())
	}
}

// must-revalidate: the expired entry is revalidated, and when the handler
// fails it is not served in its place, whatever the windows (RFC 9111
// §5.2.2.2); without it, stale-if-error lets it answer.
func TestMustRevalidateIsNeverAnsweredStale(t *testing.T) {
	for _, cc := range []string{"must-revalidate, stale-if-error=3600", "stale-if-error=3600"} {
		t.Run(cc, func(t *testing.T) {
			var fail atomic.Bool
			var sawINM atomic.Value
			h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
				if fail.Load() {
					sawINM.Store(r.Header.Get("If-None-Match"))
					http.Error(w, "down", http.StatusBadGateway)
					return
				}
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("ETag", `"v1"`)
				fmt.Fprint(w, "good")
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{TTL: time.Millisecond, StaleIfError: time.Hour}, h)
			get(t, srv.URL+"/m", nil)
			fail.Store(true)
			r := expired(t, srv.URL+"/m", nil)
			stale := r.status == http.StatusOK && r.body == "good" && r.header.Get("X-Cache") == "STALE"
			if want := cc == "stale-if-error=3600"; stale != want || !stale && r.status != http.StatusBadGateway {
				t.Fatalf("%d %q %s; want stale %v", r.status, r.body, r.header.Get("X-Cache"), want)
			}
			if inm := sawINM.Load(); inm != `"v1"` {
				t.Fatalf("the run after expiry carried If-None-Match %v, want the stored ETag", inm)
			}
		})
	}
}

// A standards cache (DeclaredFreshnessOnly) in front of a reverse proxy
// whose origin went away answers with the stale response instead of the
// proxy's 502 (RFC 9111 §4.2.4), unless the response forbids it.
func TestUnreachableOriginAnswersStale(t *testing.T) {
	for _, tc := range []struct {
		cc    string
		stale bool
	}{
		{"max-age=1", true},
		{"max-age=1, must-revalidate", false},
		{"s-maxage=1", false},
	} {
		t.Run(tc.cc, func(t *testing.T) {
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tc.cc)
				fmt.Fprint(w, "from the origin")
			}))
			target, _ := url.Parse(origin.URL)
			proxy := httputil.NewSingleHostReverseProxy(target)
			proxy.ErrorLog = log.New(io.Discard, "", 0)
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{DeclaredFreshnessOnly: true}, proxy)
			if r := get(t, srv.URL+"/p", nil); r.body != "from the origin" {
				t.Fatalf("first: %d %q", r.status, r.body)
			}
			origin.Close()
			r := expired(t, srv.URL+"/p", nil) // a second, as the response said
			if got := r.status == http.StatusOK && r.body == "from the origin" && r.header.Get("X-Cache") == "STALE"; got != tc.stale || !got && r.status != http.StatusBadGateway {
				t.Fatalf("%d %q %s; want stale %v", r.status, r.body, r.header.Get("X-Cache"), tc.stale)
			}
		})
	}
}

// A revalidation slower than the cache's SoftTimeout is answered by the
// kept response only where a stale answer is allowed: with must-revalidate
// the answer is 504 (RFC 9111 §5.2.2.2), without it the stale response.
func TestSoftTimeoutNeverAnswersMustRevalidateStale(t *testing.T) {
	for _, cc := range []string{"must-revalidate", "stale-if-error=3600"} {
		t.Run(cc, func(t *testing.T) {
			release := make(chan struct{})
			h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
				if r.Header.Get("If-None-Match") != "" {
					parked(release) // the revalidation outlasts SoftTimeout
				}
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("ETag", `"v1"`)
				fmt.Fprint(w, "good")
			}}
			t.Cleanup(func() { close(release) })
			c := newResponses(t, redistest.Client(t), cache.Options{SoftTimeout: 20 * time.Millisecond})
			srv := serve(t, c, middleware.Options{TTL: time.Millisecond}, h)
			get(t, srv.URL+"/s", nil)
			r := expired(t, srv.URL+"/s", nil)
			stale := r.status == http.StatusOK && r.body == "good" && r.header.Get("X-Cache") == "STALE"
			if want := cc != "must-revalidate"; stale != want || !stale && r.status != http.StatusGatewayTimeout {
				t.Fatalf("%d %q %s; want stale %v", r.status, r.body, r.header.Get("X-Cache"), want)
			}
		})
	}
}

// RFC 9111 §4.3: an entry refreshed with its validators is revalidated, not
// re-sent: the handler's 304 freshens the stored response (its headers
// updated per §3.2 and §4.3.4, its body kept).
func TestConditionalRefresh(t *testing.T) {
	var full, notModified atomic.Int32
	var sawINM, sawIMS atomic.Value
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if inm := r.Header.Get("If-None-Match"); inm != "" {
			sawINM.Store(inm)
			sawIMS.Store(r.Header.Get("If-Modified-Since"))
			if inm == `"v1"` {
				notModified.Add(1)
				w.Header().Set("Cache-Control", "max-age=3600")
				w.Header().Set("X-Version", "revalidated")
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		full.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Fri, 02 Jan 2026 03:04:05 GMT")
		w.Header().Set("X-Version", "first")
		fmt.Fprint(w, "the full body")
	}}
	// Fresh for 1ms, then stale for an hour: the next request is answered
	// stale and refreshes in the background.
	c := newResponses(t, redistest.Client(t), cache.Options{})
	srv := serve(t, c, middleware.Options{TTL: time.Millisecond, Stale: time.Hour}, h)
	get(t, srv.URL+"/doc", nil)
	for r := get(t, srv.URL+"/doc", nil); r.header.Get("X-Cache") != "STALE"; r = get(t, srv.URL+"/doc", nil) {
		if r.header.Get("X-Cache") != "HIT" {
			t.Fatalf("before the refresh: %s", r.header.Get("X-Cache"))
		}
	}
	waitFramesGone(t, backgroundFrame)
	if full.Load() != 1 || notModified.Load() != 1 || sawINM.Load() != `"v1"` || sawIMS.Load() != "Fri, 02 Jan 2026 03:04:05 GMT" {
		t.Fatalf("full %d, 304 %d, If-None-Match %v, If-Modified-Since %v", full.Load(), notModified.Load(), sawINM.Load(), sawIMS.Load())
	}
	r := get(t, srv.URL+"/doc", nil)
	if r.header.Get("X-Cache") != "HIT" || r.body != "the full body" || r.header.Get("X-Version") != "revalidated" ||
		r.header.Get("ETag") != `"v1"` || r.header.Get("Cache-Control") != "max-age=3600" {
		t.Fatalf("after the 304: %s %q %v", r.header.Get("X-Cache"), r.body, r.header)
	}
	// The middleware's own ETag is not sent to the handler as a validator.
	sawINM.Store("")
	h2 := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		sawINM.Store(r.Header.Get("If-None-Match"))
		fmt.Fprint(w, "no validator of its own")
	}}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{TTL: time.Millisecond, Stale: time.Hour}, h2)
	get(t, srv2.URL+"/doc", nil)
	for get(t, srv2.URL+"/doc", nil).header.Get("X-Cache") != "STALE" {
	}
	waitFramesGone(t, backgroundFrame)
	if h2.runs.Load() != 2 || sawINM.Load() != "" {
		t.Fatalf("runs %d, If-None-Match %q", h2.runs.Load(), sawINM.Load())
	}
}
