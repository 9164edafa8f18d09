package cache_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
)

func TestLocalModeCoalescesAndHits(t *testing.T) {
	c := newCache[string](t, nil, cache.Options{})
	o := &origin[string]{value: "v", release: make(chan struct{})}
	const n = 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[cache.Outcome]int{}
	for range n {
		wg.Go(func() {
			r, err := c.Fetch(context.Background(), "k", o.fn)
			if err != nil || r.Value != "v" {
				t.Errorf("%+v %v", r, err)
			}
			mu.Lock()
			outcomes[r.Outcome]++
			mu.Unlock()
		})
	}
	leakcheck.WaitBlocked(t, doFrame, n, 10*time.Second)
	close(o.release)
	wg.Wait()
	if o.calls.Load() != 1 || outcomes[cache.Miss] != 1 || outcomes[cache.Shared] != n-1 {
		t.Fatalf("calls=%d outcomes=%v", o.calls.Load(), outcomes)
	}
	if r, err := c.Fetch(context.Background(), "k", o.fn); err != nil || r.Outcome != cache.Hit {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestLocalModeGetSetDelete(t *testing.T) {
	c := newCache[int](t, nil, cache.Options{})
	ctx := context.Background()
	if _, found, err := c.Get(ctx, "k"); found || err != nil {
		t.Fatalf("empty cache: found=%v err=%v", found, err)
	}
	if err := c.Set(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	if v, found, err := c.Get(ctx, "k"); !found || v != 5 || err != nil {
		t.Fatalf("after Set: %d %v %v", v, found, err)
	}
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := c.Get(ctx, "k"); found {
		t.Fatal("found after Delete")
	}
}

func TestLocalModeStaleServedAndRefreshed(t *testing.T) {
	clk := cache.NewClock()
	c := newCache[int](t, nil, cache.Options{TTL: time.Minute, Stale: time.Hour})
	cache.UseClock(c, clk)
	ctx := context.Background()
	if err := c.Set(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	refreshed := make(chan struct{})
	clk.Advance(time.Minute + time.Millisecond) // the entry is stale
	r, err := c.Fetch(ctx, "k", func(context.Context) (int, error) { close(refreshed); return 2, nil })
	if err != nil || r.Outcome != cache.Stale || r.Value != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	<-refreshed
}

// Issue 14, defect 3: process-local mode (nil client) has the same fence as
// Redis mode. A compute is held in flight (fn blocked on a channel, 50
// callers sharing it) while Set or Delete runs; when fn then returns, its
// callers get its value, but it is never stored: the Set's value, or the
// deletion, wins. The batch path is fenced the same way.
func TestLocalModeFencesAComputeBySetDelete(t *testing.T) {
	for _, write := range []string{"Set", "Delete"} {
		for _, path := range []string{"GetOrCompute", "GetOrComputeMany"} {
			t.Run(write+"/"+path, func(t *testing.T) {
				c := newCache[string](t, nil, cache.Options{TTL: time.Hour})
				ctx := bounded(t, 10*time.Second)
				if err := c.Set(ctx, "other", "untouched"); err != nil {
					t.Fatal(err)
				}
				// The first compute is held; any later one (a caller that came
				// after the flight ended) returns "late" at once: storing that
				// after the write is legitimate, storing "computed" is not.
				started, release := make(chan struct{}, 1), make(chan struct{})
				var once sync.Once
				t.Cleanup(func() { once.Do(func() { close(release) }) })
				var n atomic.Int32
				fn := func(context.Context) (string, error) {
					if n.Add(1) == 1 {
						started <- struct{}{}
						<-release
						return "computed", nil
					}
					return "late", nil
				}
				const callers = 50
				results := make(chan valErr[string], callers)
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						if path == "GetOrCompute" {
							v, err := c.GetOrCompute(ctx, "k", fn)
							results <- valErr[string]{v, err}
							return
						}
						m, err := c.GetOrComputeMany(ctx, []string{"k"}, func(ctx context.Context, ks []string) (map[string]string, error) {
							v, err := fn(ctx)
							return map[string]string{"k": v}, err
						})
						results <- valErr[string]{m["k"], err}
					})
				}
				within(t, started, 5*time.Second, "the compute starting")
				switch write {
				case "Set":
					if err := c.Set(ctx, "k", "set-during-compute"); err != nil {
						t.Fatal(err)
					}
				case "Delete":
					if err := c.Delete(ctx, "k"); err != nil {
						t.Fatal(err)
					}
				}
				once.Do(func() { close(release) })
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				within(t, done, 5*time.Second, "the callers of the held compute returning")
				close(results)
				for r := range results {
					if r.err != nil || r.v == "" {
						t.Fatalf("a caller got %q, %v", r.v, r.err)
					}
				}
				v, found, err := c.Get(ctx, "k")
				switch write {
				case "Set":
					if err != nil || !found || (v != "set-during-compute" && v != "late") {
						t.Fatalf("after a Set during the compute: Get = %q found=%v err=%v; the compute overwrote the Set", v, found, err)
					}
				case "Delete":
					if err != nil || (found && v != "late") {
						t.Fatalf("after a Delete during the compute: Get = %q found=%v err=%v; the compute resurrected the key", v, found, err)
					}
					if !found {
						o := &origin[string]{value: "recomputed"}
						if v, err := c.GetOrCompute(ctx, "k", o.fn); err != nil || v != "recomputed" || o.calls.Load() != 1 {
							t.Fatalf("after a Delete during the compute: GetOrCompute = %q, %v, %d computes", v, err, o.calls.Load())
						}
					}
				}
				if v, found, _ := c.Get(ctx, "other"); !found || v != "untouched" {
					t.Fatalf("another key: %q found=%v", v, found)
				}
			})
		}
	}
}

// Issue 14, defect 11: the process-local store is bounded by
// MaxLocalEntries (default 100,000), whatever writes fill it (Set,
// GetOrCompute, GetOrComputeMany, from 8 goroutines at once); the entry just
// written is still there.
func TestLocalStoreBoundedByMaxLocalEntries(t *testing.T) {
	t.Run("MaxLocalEntries=100", func(t *testing.T) {
		c := newCache[string](t, nil, cache.Options{TTL: time.Hour, MaxLocalEntries: 100})
		ctx := bounded(t, 30*time.Second)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 300 {
					k := fmt.Sprint(g, "-", i)
					switch i % 3 {
					case 0:
						_ = c.Set(ctx, k, k)
					case 1:
						_, _ = c.GetOrCompute(ctx, k, func(context.Context) (string, error) { return k, nil })
					case 2:
						_, _ = c.GetOrComputeMany(ctx, []string{k, k + "b"}, func(_ context.Context, ks []string) (map[string]string, error) {
							m := map[string]string{}
							for _, k := range ks {
								m[k] = k
							}
							return m, nil
						})
					}
				}
			})
		}
		waitGroupWithin(t, &wg, 30*time.Second, "8 writers of 300 keys each")
		if n := c.Stats().LocalEntries; n > 100 || n == 0 {
			t.Fatalf("LocalEntries after 3200 distinct keys with MaxLocalEntries 100: %d", n)
		}
		if err := c.Set(ctx, "last", "v"); err != nil {
			t.Fatal(err)
		}
		if v, found, err := c.Get(ctx, "last"); err != nil || !found || v != "v" {
			t.Fatalf("the entry just written: %q found=%v err=%v", v, found, err)
		}
		if n := c.Stats().LocalEntries; n > 100 {
			t.Fatalf("LocalEntries %d > 100", n)
		}
	})
	t.Run("default", func(t *testing.T) {
		c := newCache[int](t, nil, cache.Options{TTL: time.Hour})
		ctx := bounded(t, 60*time.Second)
		const n = 100_000 + 5_000
		for i := range n {
			if err := c.Set(ctx, fmt.Sprint(i), i); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.Stats().LocalEntries; got > 100_000 || got == 0 {
			t.Fatalf("LocalEntries after %d distinct keys on the default bound: %d, want (0, 100000]", n, got)
		}
	})
}
