package cache_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A Redis farther away than InvalidationWait (a 120 ms round trip against
// the default 100 ms): no marks read can come back within the trust
// window, yet a decision may rely on a read sent after its moment however
// late the answer, so a replica's hits are served (each paying a marks
// read), not refused and recomputed; and an InvalidateTags that returned
// before a call began still fences that call, from a replica next to
// Redis as from afar.
func TestRedisFartherThanInvalidationWaitServesHitsAndKeepsTheFence(t *testing.T) {
	p := newProxy(t)
	ns := redistest.Prefix(t)
	far := func() *cache.Cache[string] {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		return newCache[string](t, rdb, cache.Options{Namespace: ns})
	}
	a, b := far(), far()
	near := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns})
	var calls atomic.Int64
	origin := func(ctx context.Context) (string, error) {
		return "v" + strconv.FormatInt(calls.Add(1), 10), cache.SetTags(ctx, "t")
	}
	p.SetLatency(60 * time.Millisecond)
	ctx := context.Background()
	if r, err := a.Fetch(ctx, "k", origin); err != nil || r.Value != "v1" {
		t.Fatalf("first fetch: %+v %v", r, err)
	}
	for i := range 3 {
		for name, c := range map[string]*cache.Cache[string]{"the filling replica": a, "another replica": b} {
			r, err := c.Fetch(ctx, "k", origin)
			if err != nil || r.Value != "v1" || r.Outcome != cache.Hit {
				t.Fatalf("read %d on %s: %+v %v, want a hit of v1", i, name, r, err)
			}
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d origin calls for one value read 7 times", n)
	}
	for i, inv := range []*cache.Cache[string]{near, a} {
		if err := inv.InvalidateTags(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		want := "v" + strconv.Itoa(i+2)
		for name, c := range map[string]*cache.Cache[string]{"a far replica": b, "the invalidating one": inv} {
			r, err := c.Fetch(ctx, "k", origin)
			if err != nil || r.Value != want {
				t.Fatalf("invalidation %d, %s: %+v %v, want %s (the value computed after it)", i, name, r, err, want)
			}
		}
	}
	if st := b.Stats(); st.Degraded != 0 || st.BreakerOpen {
		t.Errorf("a distant Redis counted as down: %+v", st)
	}
}
