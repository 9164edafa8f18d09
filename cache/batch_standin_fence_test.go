package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// A value standing in for a batch's failed compute (stale-if-error) is
// judged when the batch answers, like every value it hands back
// (docs/invalidation.md, "ExpireTags: soft invalidation"): an ExpireTags
// that returned after that compute failed, while the batch still waited
// for another key, refuses it, and the key is loaded again; if that
// compute fails too, the value stands in for it (a failure after the
// ExpireTags). Without an invalidation meanwhile the stand-in answers at
// once, its compute tried once.
//
// k0 holds "old" tagged "t", expired by ExpireTags("t"); k4 is held by a
// GetOrCompute of the batch's process. GetOrComputeMany([k4, k0]) claims
// k0, whose compute fails ("old" stands in), and waits for k4; then
// ExpireTags("t") returns; then k4 is released. The robustness suite's
// local scenario found this one (seed 1796549362450495620): k0 answered
// c388, computed before an ExpireTags that returned 41 ms before the
// batch did, for a compute that had failed before the ExpireTags began.
func TestBatchStandInIsFencedWhenTheBatchAnswers(t *testing.T) {
	for _, mode := range []string{"local", "redis"} {
		for _, tc := range []struct {
			name      string
			expire    bool // ExpireTags("t") while the batch waits for k4
			failAgain bool // the batch's second compute fails too
			want      string
			calls     int32
		}{
			{name: "expired-meanwhile", expire: true, want: "new", calls: 2},
			{name: "expired-meanwhile-fails-again", expire: true, failAgain: true, want: "old", calls: 2},
			{name: "no-invalidation-meanwhile", want: "old", calls: 1},
		} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				opts := cache.Options{TTL: time.Hour, StaleIfError: time.Hour, WaitTimeout: 20 * time.Second}
				var b, inv *cache.Cache[string]
				if mode == "local" {
					b = newCache[string](t, nil, opts)
					inv = b // process-local: the invalidations of b's own process
				} else {
					cs := replicas[string](t, 2, opts)
					b, inv = cs[0], cs[1]
				}
				ctx := bounded(t, 60*time.Second)

				if _, err := b.GetOrCompute(ctx, "k0", func(ctx context.Context) (string, error) {
					return "old", cache.SetTags(ctx, "t")
				}); err != nil {
					t.Fatal(err)
				}
				if err := inv.ExpireTags(ctx, "t"); err != nil {
					t.Fatal(err)
				}

				// k4's compute, in b's process, held until released.
				k4 := newHeld(t, "k4 held")
				heldK4 := async(func() error { _, err := b.GetOrCompute(ctx, "k4", k4.fn); return err })
				within(t, k4.calls, 10*time.Second, "the compute of k4")

				var calls atomic.Int32
				fn := func(ctx context.Context, keys []string) (map[string]string, error) {
					n := calls.Add(1)
					if err := cache.SetTags(ctx, "t"); err != nil {
						return nil, err
					}
					if n == 1 || tc.failAgain {
						return nil, errors.New("origin down")
					}
					out := map[string]string{}
					for _, k := range keys {
						out[k] = "new"
					}
					return out, nil
				}
				before := batchWaiters()
				batch := async(func() valErr[map[string]string] {
					m, err := b.GetOrComputeMany(ctx, []string{"k4", "k0"}, fn)
					return valErr[map[string]string]{m, err}
				})
				// k0's compute failed and "old" stood in for it: the batch
				// waits for k4 alone.
				eventually(t, 10*time.Second, func() bool { return batchWaiters().joining > before.joining }, func() string {
					return "the batch did not get to waiting for k4 alone"
				})
				if n := calls.Load(); n != 1 {
					t.Fatalf("the batch's compute ran %d times before it waited for k4, want 1", n)
				}
				if tc.expire {
					if err := inv.ExpireTags(ctx, "t"); err != nil {
						t.Fatal(err)
					}
				}
				k4.Release()
				got := within(t, batch, 20*time.Second, "the batch").v
				if got.err != nil {
					t.Fatal(got.err)
				}
				if got.v["k0"] != tc.want {
					t.Errorf("k0 = %q, want %q", got.v["k0"], tc.want)
				}
				if got.v["k4"] != "k4 held" {
					t.Errorf("k4 = %q, want the held compute's value", got.v["k4"])
				}
				if n := calls.Load(); n != tc.calls {
					t.Errorf("the batch's compute ran %d times, want %d", n, tc.calls)
				}
				if err := within(t, heldK4, 10*time.Second, "the call of k4").v; err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
