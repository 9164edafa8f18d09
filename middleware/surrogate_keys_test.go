package middleware_test

// Surrogate keys across a fleet: a purge on one replica reaches every
// replica, a handler run the purge overlaps is neither stored nor served,
// and a request purged on every run is answered 503. The fleet helpers
// here serve the purge tests of the other files too.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// fleetReplica is one replica of a fleet: its own go-redis client, cache,
// middleware, chi router and server, with the purge handler mounted.
type fleetReplica struct {
	c   *cache.Cache[middleware.Response]
	url string
}

// registerPurge makes PURGE a method chi routes (it answers 405 for
// methods it does not know); call it before building a router.
var registerPurge = sync.OnceFunc(func() { chi.RegisterMethod(middleware.MethodPurge) })

// tagFleet starts n replicas sharing one Redis namespace; routes mounts
// the application's cached routes on each replica's router.
func tagFleet(t *testing.T, n int, opts middleware.Options, routes func(r chi.Router)) []fleetReplica {
	t.Helper()
	registerPurge()
	ns := redistest.Prefix(t)
	var fleet []fleetReplica
	for range n {
		c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Hour})
		r := chi.NewRouter()
		r.Group(func(r chi.Router) {
			r.Use(middleware.CacheWithOptions(c, opts))
			routes(r)
		})
		r.Handle("/purge", middleware.PurgeHandler(c))
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		fleet = append(fleet, fleetReplica{c: c, url: srv.URL})
	}
	return fleet
}

// purgeReq sends a purge request to a replica's purge handler.
func purgeReq(t *testing.T, url, method string, hdr map[string]string, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url+"/purge", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return sendRequest(t, req, hdr)
}

// assertNoTagHeaders fails when a reply carries a tag header.
func assertNoTagHeaders(t *testing.T, rep reply, what string) {
	t.Helper()
	for _, name := range []string{"Surrogate-Key", "Cache-Tag"} {
		if v, ok := rep.header[name]; ok {
			t.Errorf("%s: %s reached the client: %q", what, name, v)
		}
	}
}

// A response tagged on replica A (by header or by Tag) is a HIT on every
// replica; a purge of its key on replica B makes every replica answer a
// new handler run; responses with other keys stay HITs.
func TestSurrogateKeyPurgedOnOneReplicaMissesOnAll(t *testing.T) {
	var runs atomic.Int32
	fleet := tagFleet(t, 3, middleware.Options{}, func(r chi.Router) {
		r.Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
			id := chi.URLParam(r, "id")
			w.Header().Set("Surrogate-Key", "report-"+id+" reports")
			w.Header().Set("Cache-Tag", "owner-"+id)
			fmt.Fprintf(w, "report %s run %d", id, runs.Add(1))
		})
		r.Get("/code/{id}", func(w http.ResponseWriter, r *http.Request) {
			id := chi.URLParam(r, "id")
			if err := middleware.Tag(r.Context(), "code-"+id, "café"); err != nil {
				t.Error(err)
			}
			fmt.Fprintf(w, "code %s run %d", id, runs.Add(1))
		})
	})
	a, b := fleet[0], fleet[1]
	// warm tags every route on replica A; every replica then hits it.
	warm := func(path string) string {
		t.Helper()
		first := get(t, a.url+path, nil)
		if first.header.Get("X-Cache") != middleware.StatusMiss {
			t.Fatalf("%s on A: %s, want MISS", path, first.header.Get("X-Cache"))
		}
		for i, rep := range fleet {
			got := get(t, rep.url+path, nil)
			if got.header.Get("X-Cache") != middleware.StatusHit || got.body != first.body {
				t.Fatalf("%s on replica %d: %s %q, want HIT %q", path, i, got.header.Get("X-Cache"), got.body, first.body)
			}
			assertNoTagHeaders(t, got, path)
		}
		assertNoTagHeaders(t, first, path)
		return first.body
	}
	for _, tc := range []struct {
		name, path, other string
		purge             func(t *testing.T)
	}{
		{name: "Surrogate-Key header, PURGE", path: "/reports/1", other: "/reports/2", purge: func(t *testing.T) {
			if rep := purgeReq(t, b.url, "PURGE", map[string]string{"Surrogate-Key": "report-1"}, ""); rep.status != http.StatusOK {
				t.Fatalf("purge: %d %s", rep.status, rep.body)
			}
		}},
		{name: "Cache-Tag header, POST JSON", path: "/reports/3", other: "/reports/4", purge: func(t *testing.T) {
			rep := purgeReq(t, b.url, http.MethodPost, map[string]string{"Content-Type": "application/json"}, `{"tags": ["owner-3"]}`)
			if rep.status != http.StatusOK || !strings.Contains(rep.body, "owner-3") {
				t.Fatalf("purge: %d %s", rep.status, rep.body)
			}
		}},
		{name: "Tag, Purge", path: "/code/5", other: "/code/6", purge: func(t *testing.T) {
			if err := middleware.Purge(t.Context(), b.c, "code-5"); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "non-ASCII key purged by header", path: "/code/7", other: "/reports/8", purge: func(t *testing.T) {
			if rep := purgeReq(t, b.url, "PURGE", map[string]string{"Surrogate-Key": "café"}, ""); rep.status != http.StatusOK {
				t.Fatalf("purge: %d %s", rep.status, rep.body)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := warm(tc.path)
			otherBody := warm(tc.other)
			tc.purge(t)
			for i, rep := range fleet {
				got := get(t, rep.url+tc.path, nil)
				if got.body == old {
					t.Errorf("replica %d answered the purged response %q (%s)", i, old, got.header.Get("X-Cache"))
				}
				if i == 0 && got.header.Get("X-Cache") != middleware.StatusMiss {
					t.Errorf("replica 0 after the purge: %s, want MISS", got.header.Get("X-Cache"))
				}
				if other := get(t, rep.url+tc.other, nil); other.body != otherBody || other.header.Get("X-Cache") != middleware.StatusHit {
					t.Errorf("replica %d: %s not purged, got %s %q, want HIT %q", i, tc.other, other.header.Get("X-Cache"), other.body, otherBody)
				}
			}
		})
	}
}

// The fence: a handler run that is still running while a purge of its key
// runs and returns is neither stored nor served, to its own request or
// anyone after; its request is answered by a new run. The response varies
// or not, or varies on more than its marker said (a variant is stored by a
// compute of its own, after the run; so is the longer marker).
func TestPurgeDuringRunningHandlerNeitherStoresNorServesIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vary    func(n int32) string // the Vary of run n
		blocked int32                // the run the purge overlaps
	}{
		{name: "no vary", vary: func(int32) string { return "" }, blocked: 1},
		{name: "vary", vary: func(int32) string { return "Accept-Language" }, blocked: 1},
		{name: "vary grows", vary: func(n int32) string {
			if n == 1 {
				return "Accept-Language"
			}
			return "Accept-Language, Accept"
		}, blocked: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			started, release := make(chan struct{}), make(chan struct{})
			fleet := tagFleet(t, 2, middleware.Options{}, func(r chi.Router) {
				r.Get("/live", func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					w.Header().Set("Surrogate-Key", "live")
					if v := tc.vary(n); v != "" {
						w.Header().Set("Vary", v)
					}
					if n == tc.blocked {
						close(started)
						parked(release)
					}
					fmt.Fprintf(w, "run %d", n)
				})
			})
			a, b := fleet[0], fleet[1]
			if tc.blocked > 1 { // a marker first, for another language
				get(t, a.url+"/live", map[string]string{"Accept-Language": "en"})
			}
			de := map[string]string{"Accept-Language": "de"}
			purged := fmt.Sprintf("run %d", tc.blocked)
			answer := make(chan reply, 1)
			go func() { answer <- get(t, a.url+"/live", de) }()
			recv(t, started, "the run the purge overlaps to start")
			if err := middleware.Purge(t.Context(), b.c, "live"); err != nil {
				t.Fatal(err)
			}
			close(release) // the run returns its response only now, after the purge returned
			got := recv(t, answer, "the request whose run the purge overlapped")
			if got.body == purged {
				t.Fatalf("the purged run's response was served to its own request (%s)", got.header.Get("X-Cache"))
			}
			// (A purged marker may cost one more run: "vary grows".)
			for round := range 2 {
				for i, rep := range fleet {
					got := get(t, rep.url+"/live", de)
					if got.body == purged {
						t.Fatalf("replica %d served the purged run's response (%s)", i, got.header.Get("X-Cache"))
					}
					if round == 1 && got.header.Get("X-Cache") != middleware.StatusHit {
						t.Errorf("replica %d: %s %q, want a HIT of a run after the purge", i, got.header.Get("X-Cache"), got.body)
					}
				}
			}
		})
	}
}

// When every run of a request is purged while it runs, the cache stops
// running it again (ErrInvalidated): the request is answered 503 with
// Retry-After, never by one of its purged runs, and nothing is stored; the
// next request is answered by a run after the purges.
func TestRequestPurgedOnEveryRunIsUnavailable(t *testing.T) {
	var runs atomic.Int32
	var purging atomic.Bool // the runs of the first request are purged
	purging.Store(true)
	started, release := make(chan int32), make(chan struct{})
	fleet := tagFleet(t, 2, middleware.Options{}, func(r chi.Router) {
		r.Get("/hot", func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			w.Header().Set("Surrogate-Key", "hot")
			if purging.Load() {
				started <- n
				parked(release)
			}
			fmt.Fprintf(w, "run %d", n)
		})
	})
	a, b := fleet[0], fleet[1]
	answer := make(chan reply, 1)
	go func() { answer <- get(t, a.url+"/hot", nil) }()
	var got reply
	purged := 0
	for done := false; !done; {
		select {
		case <-started:
			if err := middleware.Purge(t.Context(), b.c, "hot"); err != nil {
				t.Fatal(err)
			}
			purged++
			release <- struct{}{} // this run returns only after its purge returned
		case got = <-answer:
			done = true
		case <-time.After(30 * time.Second):
			t.Fatalf("no answer after %d purged runs", purged)
		}
	}
	if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
		t.Fatalf("after %d purged runs: %d %q (%s), want 503 with Retry-After", purged, got.status, got.body, got.header.Get("X-Cache"))
	}
	if purged < 2 {
		t.Errorf("the request was given up after %d purged run(s); the cache runs it again after a purge", purged)
	}
	purging.Store(false)
	want := fmt.Sprintf("run %d", purged+1)
	for i, rep := range fleet {
		got := get(t, rep.url+"/hot", nil)
		if got.body != want {
			t.Errorf("replica %d after the purges: %d %q (%s), want the new %s", i, got.status, got.body, got.header.Get("X-Cache"), want)
		}
	}
}
