package middleware_test

// The purge fence on the paths docs/http.md ("Purging") names beside the
// plain miss: requests that share a run (on the replica, HEAD among them,
// and on another replica through the Redis lease), a response that is
// answered but not stored, a revalidation the purge overlaps, and the
// process-local and L1 modes. Once Purge returns nil, no request is
// answered a response tagged with a purged key whose handler run began
// before the purge. This file has the runs shared and the stored
// responses purged; purge_fence_revalidation_test.go the revalidations,
// purge_fence_standin_test.go a purged response standing in for a run.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// fenceFleet starts n replicas of one chi application serving h at /doc
// (GET, and HEAD through chi's GetHead) behind the middleware, each with
// its own go-redis client and cache in one namespace; local makes one
// process-local replica (no Redis).
func fenceFleet(t *testing.T, n int, local bool, copts cache.Options, opts middleware.Options, h http.HandlerFunc) []fleetReplica {
	t.Helper()
	copts.Namespace = redistest.Prefix(t)
	var fleet []fleetReplica
	for range n {
		var rdb redis.UniversalClient
		if !local {
			rdb = redistest.Client(t)
		}
		c := newResponses(t, rdb, copts)
		r := chi.NewRouter()
		r.Use(chimiddleware.GetHead)
		r.With(middleware.CacheWithOptions(c, opts)).Get("/doc", h)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		fleet = append(fleet, fleetReplica{c: c, url: srv.URL})
	}
	return fleet
}

// A run the purge overlaps answers none of the requests that share it —
// a GET and a HEAD that joined it on its replica, and a request on another
// replica waiting on its lease, before the purge returned or after — nor
// any request after; each is answered by a run begun after the purge. For
// a response that varies (a marker, then a variant), in the process-local
// mode and with L1 too.
func TestPurgeReachesEveryRequestSharingTheRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		local    bool
		copts    cache.Options
		vary     bool // the response varies: a marker, then a variant
	}{
		// The waiters on the lease wait as long as the test needs.
		{name: "fleet", replicas: 2, copts: cache.Options{TTL: time.Hour, WaitTimeout: parkBound}},
		{name: "fleet, vary", replicas: 2, copts: cache.Options{TTL: time.Hour, WaitTimeout: parkBound}, vary: true},
		{name: "fleet with L1", replicas: 2, copts: cache.Options{TTL: time.Hour, WaitTimeout: parkBound, L1Size: 100}},
		{name: "process-local", replicas: 1, local: true, copts: cache.Options{TTL: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			started, release := make(chan struct{}), make(chan struct{})
			fleet := fenceFleet(t, tc.replicas, tc.local, tc.copts, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				w.Header().Set("Surrogate-Key", "doc")
				w.Header().Set("X-Run", fmt.Sprint(n))
				if tc.vary {
					w.Header().Set("Vary", "Accept-Language")
				}
				if n == 1 {
					close(started)
					parked(release)
				}
				fmt.Fprintf(w, "run %d", n)
			})
			a, last := fleet[0], fleet[len(fleet)-1]
			var wg sync.WaitGroup
			replies := make([]reply, 3)
			wg.Go(func() { replies[0] = get(t, a.url+"/doc", nil) })
			recv(t, started, "the run the purge overlaps to start")
			wg.Go(func() { replies[1] = get(t, a.url+"/doc", nil) })
			wg.Go(func() { replies[2] = do(t, http.MethodHead, a.url+"/doc", nil) })
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 3, waitBound)
			var other chan reply
			if len(fleet) > 1 { // a request on another replica waits on the run's lease
				other = make(chan reply, 1)
				go func() { other <- get(t, fleet[1].url+"/doc", nil) }()
				leakcheck.WaitBlocked(t, "cache.(*Cache[...]).wait(", 1, waitBound)
			}
			if err := middleware.Purge(t.Context(), last.c, "doc"); err != nil {
				t.Fatal(err)
			}
			// Requests begun after the purge returned join the same run.
			replies = append(replies, reply{})
			wg.Go(func() { replies[3] = get(t, a.url+"/doc", nil) })
			// (Each request is in a singleflight: the other replica's too.)
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", len(fleet)+3, waitBound)
			var lateOther chan reply
			if len(fleet) > 1 { // joins the other replica's wait on the lease
				lateOther = make(chan reply, 1)
				go func() { lateOther <- get(t, fleet[1].url+"/doc", nil) }()
				leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 6, waitBound)
			}
			close(release)
			waitAll(t, &wg, "the requests sharing the purged run")
			if other != nil {
				replies = append(replies, recv(t, other, "the request waiting on the lease"))
				replies = append(replies, recv(t, lateOther, "the request waiting on the lease after the purge"))
			}
			for i, rep := range replies {
				if rep.status != http.StatusOK || rep.header.Get("X-Run") == "1" || rep.header.Get("X-Run") == "" {
					t.Errorf("request %d: %d run %q (%s), want a run after the purge", i, rep.status, rep.header.Get("X-Run"), rep.header.Get("X-Cache"))
				}
			}
			for i, rep := range fleet {
				if got := get(t, rep.url+"/doc", nil); got.header.Get("X-Run") == "1" || got.header.Get("X-Cache") != middleware.StatusHit {
					t.Errorf("replica %d after the purge: %s run %q, want a HIT of a run after it", i, got.header.Get("X-Cache"), got.header.Get("X-Run"))
				}
			}
		})
	}
}

// A tagged response that is answered but not stored (here stale on
// arrival: max-age=0) is not fenced by the cache: a request that joins its
// run after the purge returned is answered by a run of its own, never by
// the run the purge overlapped.
func TestPurgeReachesARequestJoiningAnUnstoredRun(t *testing.T) {
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	fleet := fenceFleet(t, 2, false, cache.Options{TTL: time.Hour}, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		w.Header().Set("Surrogate-Key", "doc")
		w.Header().Set("Cache-Control", "max-age=0")
		w.Header().Set("X-Run", fmt.Sprint(n))
		if n == 1 {
			close(started)
			parked(release)
		}
		fmt.Fprintf(w, "run %d", n)
	})
	a, b := fleet[0], fleet[1]
	first := make(chan reply, 1)
	go func() { first <- get(t, a.url+"/doc", nil) }()
	recv(t, started, "the run the purge overlaps to start")
	if err := middleware.Purge(t.Context(), b.c, "doc"); err != nil {
		t.Fatal(err)
	}
	late := make(chan reply, 1) // begins after the purge returned
	go func() { late <- get(t, a.url+"/doc", nil) }()
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 2, waitBound)
	close(release)
	recv(t, first, "the request whose run the purge overlapped")
	if got := recv(t, late, "the request after the purge"); got.status != http.StatusOK || got.header.Get("X-Run") == "1" {
		t.Fatalf("a request begun after the purge: %d run %q (%s), want a run of its own", got.status, got.header.Get("X-Run"), got.header.Get("X-Cache"))
	}
}

// A stored response purged while in L1 on every replica, or in a
// process-local cache, is answered by no replica after the purge.
func TestPurgeReachesL1AndTheProcessLocalStore(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		local    bool
		copts    cache.Options
	}{
		{name: "fleet with L1", replicas: 2, copts: cache.Options{TTL: time.Hour, L1Size: 100}},
		{name: "process-local", replicas: 1, local: true, copts: cache.Options{TTL: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			fleet := fenceFleet(t, tc.replicas, tc.local, tc.copts, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Surrogate-Key", "doc")
				fmt.Fprintf(w, "run %d", runs.Add(1))
			})
			get(t, fleet[0].url+"/doc", nil)
			for round := range 2 { // the second round's hits come from L1
				for i, rep := range fleet {
					if got := get(t, rep.url+"/doc", nil); got.body != "run 1" || got.header.Get("X-Cache") != middleware.StatusHit {
						t.Fatalf("round %d, replica %d: %s %q, want a HIT of run 1", round, i, got.header.Get("X-Cache"), got.body)
					}
				}
			}
			if err := middleware.Purge(t.Context(), fleet[len(fleet)-1].c, "doc"); err != nil {
				t.Fatal(err)
			}
			for i, rep := range fleet {
				if got := get(t, rep.url+"/doc", nil); got.body == "run 1" {
					t.Errorf("replica %d after the purge: %s %q", i, got.header.Get("X-Cache"), got.body)
				}
			}
		})
	}
}
