package middleware_test

// The purge fence on a run a purge overlapped after its handler returned,
// while its response was being stored, up to its answer (docs/http.md,
// "Purging"). A response that varies is stored under its variant key by a
// Fetch of its own; when that store fails (here because purges of the
// response's keys keep coming while it is filled, until the cache gives
// up on it with ErrInvalidated), the run still answers nothing: a store
// that failed is not one of the unstored responses no purge fences. A
// response that does not vary is stored by the run's own fill, which the
// cache's fence at the answer refuses.

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

// purgingCodec is msgpack that, each time it encodes a response (not a
// marker) that purges says to purge, first purges the key "doc" on another
// replica, purger, and waits for that purge to return: a purge after the
// handler returned and before its response is stored and answered, as a
// slow fill or a slow link to Redis lets one come.
type purgingCodec struct {
	cache.MsgpackCodec
	purges  func(body string) bool
	purger  atomic.Pointer[cache.Cache[middleware.Response]]
	purged  atomic.Int32
	failure atomic.Value // the first purge's error
}

func (c *purgingCodec) Marshal(v any) ([]byte, error) {
	// (cache.New checks the codec before the purger exists.)
	if r, ok := v.(*middleware.Response); ok && len(r.VaryOn) == 0 && c.purger.Load() != nil && c.purges(string(r.Body)) {
		ctx, cancel := context.WithTimeout(context.Background(), waitBound)
		defer cancel()
		if err := middleware.Purge(ctx, c.purger.Load(), "doc"); err != nil {
			c.failure.CompareAndSwap(nil, err)
			return nil, fmt.Errorf("purging codec: %w", err)
		}
		c.purged.Add(1)
	}
	return c.MsgpackCodec.Marshal(v)
}

// A run whose variant's store failed because purges of its keys came
// while it was stored, after the handler had returned, does not answer
// its own request: the run after it does, or, when that run and the three
// after it are purged the same way, a 503 with Retry-After (the cache's
// ErrInvalidated), never one of the purged runs. The same for a response
// that does not vary, whose store the purges do not fail.
func TestPurgeReachesARunWhoseStoreFailed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vary    bool // stored under a variant key, by a Fetch of its own
		purges  func(body string) bool
		status  int
		wantRun string // "" for none
		runs    int32
	}{
		{name: "variant, the run after it answers", vary: true, purges: func(body string) bool { return body == "run 1" },
			status: http.StatusOK, wantRun: "2", runs: 2},
		{name: "variant, four runs purged: 503", vary: true, purges: func(string) bool { return true },
			status: http.StatusServiceUnavailable, runs: 4},
		// Without Vary the response is stored by the run's own fill, which
		// a purge during it does not fail: the cache's fence at the answer
		// refuses it.
		{name: "the run after it answers", purges: func(body string) bool { return body == "run 1" },
			status: http.StatusOK, wantRun: "2", runs: 2},
		{name: "four runs purged: 503", purges: func(string) bool { return true },
			status: http.StatusServiceUnavailable, runs: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codec := &purgingCodec{purges: tc.purges}
			var runs atomic.Int32
			fleet := fenceFleet(t, 2, false, cache.Options{TTL: time.Hour, Codec: codec}, middleware.Options{}, func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				w.Header().Set("Surrogate-Key", "doc")
				if tc.vary {
					w.Header().Set("Vary", "Accept-Language")
				}
				w.Header().Set("X-Run", fmt.Sprint(n))
				fmt.Fprintf(w, "run %d", n)
			})
			codec.purger.Store(fleet[1].c)
			got := get(t, fleet[0].url+"/doc", nil)
			if err, _ := codec.failure.Load().(error); err != nil {
				t.Fatal(err)
			}
			if codec.purged.Load() == 0 {
				t.Fatal("no purge came while a run's response was stored")
			}
			if got.status != tc.status || got.header.Get("X-Run") != tc.wantRun {
				t.Fatalf("after %d purges that returned before the answer: %d run %q %q (%s), want %d run %q",
					codec.purged.Load(), got.status, got.header.Get("X-Run"), got.body, got.header.Get("X-Cache"), tc.status, tc.wantRun)
			}
			if tc.status == http.StatusServiceUnavailable && got.header.Get("Retry-After") != "1" {
				t.Errorf("503 without Retry-After: 1: %v", got.header)
			}
			if n := runs.Load(); n != tc.runs {
				t.Errorf("%d handler runs, want %d", n, tc.runs)
			}
			if tc.wantRun == "" {
				return
			}
			for i, rep := range fleet {
				if got := get(t, rep.url+"/doc", nil); got.header.Get("X-Run") != tc.wantRun || got.header.Get("X-Cache") != middleware.StatusHit {
					t.Errorf("replica %d after the purges: %s run %q, want a HIT of run %s", i, got.header.Get("X-Cache"), got.header.Get("X-Run"), tc.wantRun)
				}
			}
		})
	}
}
