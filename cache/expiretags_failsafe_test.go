package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// expireTagsModes are the setups ExpireTags is checked on: two replicas
// (L1 off and on), and process-local mode.
var expireTagsModes = []struct {
	name     string
	replicas int
	l1       int
	local    bool
}{
	{"redis", 2, 0, false},
	{"redis L1", 2, 100, false},
	{"local", 1, 0, true},
}

// expireTagsFleet returns the caches of a mode, on one hand-moved clock.
func expireTagsFleet(t *testing.T, mode int, opts cache.Options) ([]*cache.Cache[string], *cache.Clock) {
	t.Helper()
	m := expireTagsModes[mode]
	opts.L1Size = m.l1
	opts.Namespace = redistest.Prefix(t)
	var cs []*cache.Cache[string]
	for range m.replicas {
		var rdb redis.UniversalClient
		if !m.local {
			rdb = redistest.Client(t)
		}
		cs = append(cs, newCache[string](t, rdb, opts))
	}
	clk := cache.NewClock()
	clocked(clk, cs...)
	return cs, clk
}

// tagged is a compute function (single and batch) tagging its values "t",
// or failing, counting its calls.
type tagged struct {
	calls atomic.Int32
	fail  atomic.Bool
	value atomic.Value // string
}

func newTagged(v string) *tagged {
	f := &tagged{}
	f.value.Store(v)
	return f
}

func (f *tagged) fn(ctx context.Context) (string, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return "", errors.New("origin down")
	}
	return f.value.Load().(string), cache.SetTags(ctx, "t")
}

func (f *tagged) batch(ctx context.Context, keys []string) (map[string]string, error) {
	v, err := f.fn(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range keys {
		out[k] = v
	}
	return out, nil
}

// A value the fail-safe throttle re-armed, then expired by ExpireTags, is
// hidden like any expired value: Get finds nothing on any replica, and the
// next call (single or batch) calls fn instead of answering it stale; it
// still stands in when fn fails, inside its StaleIfError window.
func TestExpireTagsHidesAFailSafeValue(t *testing.T) {
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, time.Minute)
			cs, clk := expireTagsFleet(t, mode, cache.Options{TTL: time.Minute, StaleIfError: time.Hour, FailSafeThrottle: time.Hour})
			a, b := cs[0], cs[len(cs)-1]
			f := newTagged("old")
			if _, err := a.GetOrCompute(ctx, "k", f.fn); err != nil {
				t.Fatal(err)
			}
			if _, err := a.GetOrComputeMany(ctx, []string{"m"}, f.batch); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute + time.Millisecond) // expired, inside StaleIfError
			f.fail.Store(true)
			f.calls.Store(0)
			if r, err := a.Fetch(ctx, "k", f.fn); err != nil || r.Value != "old" || r.Outcome != cache.Stale {
				t.Fatalf("failing origin: %+v %v", r, err)
			}
			if got, err := a.GetOrComputeMany(ctx, []string{"m"}, f.batch); err != nil || got["m"] != "old" {
				t.Fatalf("failing origin, batch: %v %v", got, err)
			}
			// Re-armed: inside the throttle nobody calls the origin.
			if r, err := b.Fetch(ctx, "k", f.fn); err != nil || r.Value != "old" || !errors.Is(r.Err, cache.ErrFailSafe) || f.calls.Load() != 2 {
				t.Fatalf("inside the throttle: %+v %v, fn ran %d times", r, err, f.calls.Load())
			}
			if err := b.ExpireTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			for i, c := range cs {
				for _, k := range []string{"k", "m"} {
					if v, found, err := c.Get(ctx, k); found || err != nil {
						t.Errorf("replica %d: Get(%s) after ExpireTags found the fail-safe value: %q %v %v", i, k, v, found, err)
					}
				}
			}
			// The origin still fails: it is called, and the value stands in.
			f.calls.Store(0)
			if r, err := a.Fetch(ctx, "k", f.fn); err != nil || r.Value != "old" || r.Outcome != cache.Stale || f.calls.Load() != 1 {
				t.Fatalf("failing origin after ExpireTags: %+v %v, fn ran %d times, want once", r, err, f.calls.Load())
			}
			if got, err := b.GetOrComputeMany(ctx, []string{"m"}, f.batch); err != nil || got["m"] != "old" || f.calls.Load() != 2 {
				t.Fatalf("failing origin after ExpireTags, batch: %v %v, fn ran %d times in all, want twice", got, err, f.calls.Load())
			}
			// The origin answers again: its value, at once.
			f.fail.Store(false)
			f.value.Store("new")
			if r, err := b.Fetch(ctx, "k", f.fn); err != nil || r.Value != "new" || r.Outcome != cache.Miss {
				t.Fatalf("working origin after ExpireTags: %+v %v", r, err)
			}
			if got, err := a.GetOrComputeMany(ctx, []string{"m"}, f.batch); err != nil || got["m"] != "new" {
				t.Fatalf("working origin after ExpireTags, batch: %v %v", got, err)
			}
		})
	}
}

// With no stale-if-error window (the default options), a value ExpireTags
// expired while still inside its TTL does not stand in for a failing
// origin: it is expired, and past its TTL nothing would keep it for errors.
// With StaleIfError it does.
func TestExpireTagsStandInOnlyWithStaleIfError(t *testing.T) {
	for mode, m := range expireTagsModes {
		t.Run(m.name, func(t *testing.T) {
			for _, staleIfError := range []time.Duration{0, time.Hour} {
				ctx := bounded(t, time.Minute)
				cs, _ := expireTagsFleet(t, mode, cache.Options{TTL: time.Hour, StaleIfError: staleIfError})
				a, b := cs[0], cs[len(cs)-1]
				f := newTagged("old")
				trackEachForL1(t, []string{"k", "m"}, cs...)
				if _, err := a.GetOrCompute(ctx, "k", f.fn); err != nil {
					t.Fatal(err)
				}
				if _, err := a.GetOrComputeMany(ctx, []string{"m"}, f.batch); err != nil {
					t.Fatal(err)
				}
				if err := b.ExpireTags(ctx, "t"); err != nil {
					t.Fatal(err)
				}
				f.fail.Store(true)
				r, err := b.Fetch(ctx, "k", f.fn)
				got, berr := a.GetOrComputeMany(ctx, []string{"m"}, f.batch)
				if staleIfError == 0 {
					if err == nil {
						t.Errorf("StaleIfError 0: a failing origin after ExpireTags was answered by %+v", r)
					}
					if berr == nil {
						t.Errorf("StaleIfError 0: a failing batch after ExpireTags was answered by %v", got)
					}
					continue
				}
				if err != nil || r.Value != "old" || r.Outcome != cache.Stale {
					t.Errorf("StaleIfError 1h: %+v %v, want the expired value standing in", r, err)
				}
				if berr != nil || got["m"] != "old" {
					t.Errorf("StaleIfError 1h, batch: %v %v, want the expired value standing in", got, berr)
				}
			}
		})
	}
}
