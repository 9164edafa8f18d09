package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The invalidation fence on the paths beside a lead's compute: a compute
// done without the lease after WaitTimeout (OnBusy: BusyCompute), a load
// whose value is still being stored (also a SoftTimeout's background
// fill), a compute done while Redis was unreachable, each shared by the
// callers of its process (singleflight), and a batch's keys. After
// InvalidateTags returns nil, no caller is served a value carrying one of
// its tags whose compute began before the call (docs/invalidation.md,
// "Tags and InvalidateTags"): not the caller that started the compute, and not one
// that began after the invalidation returned and joined it. And a
// replica's own Set or Delete reaches the calls that begin after it on
// that replica while such a load is in flight.

// A replica that computes without the lease after WaitTimeout (OnBusy:
// BusyCompute, the default) is fenced like the lease holder: when
// InvalidateTags on a third replica returns while that compute runs, its
// value answers neither the caller that started it nor a caller that
// began after the invalidation returned and shared it; it is computed
// again at once (Stats().Recomputed). Tried with the first caller a Fetch
// (joined by a FetchWithFallback, whose fallback does not apply to a load
// it joins) and a GetOrComputeMany (whose key, held by another replica, is
// computed alone after the wait; joined by a Fetch).
func TestInvalidateTagsReachesABusyCompute(t *testing.T) {
	for _, first := range []string{"Fetch", "GetOrComputeMany"} {
		t.Run(first, func(t *testing.T) {
			cs := replicas[string](t, 3, cache.Options{TTL: time.Hour, WaitTimeout: 300 * time.Millisecond})
			a, b, c := cs[0], cs[1], cs[2]
			ctx := bounded(t, 30*time.Second)

			holder := newHeld(t, "holder's") // A holds the lease past B's WaitTimeout
			heldA := async(func() error { _, err := a.GetOrCompute(ctx, inflightKey, holder.fn); return err })
			within(t, holder.calls, 10*time.Second, "A's compute")

			o := newTwoPhase(t)
			started := async(func() fetched {
				if first == "Fetch" {
					r, err := b.Fetch(ctx, inflightKey, o.fn)
					return fetched{r, err}
				}
				m, err := b.GetOrComputeMany(ctx, []string{inflightKey}, o.batch)
				return fetched{cache.Result[string]{Value: m[inflightKey]}, err}
			})
			within(t, o.started, 10*time.Second, "B's compute after WaitTimeout")
			if err := c.InvalidateTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			joined := joinLoad(t, func() fetched {
				own := func(context.Context) (string, error) { return "joiner's own", nil }
				var r cache.Result[string]
				var err error
				if first == "Fetch" {
					r, err = b.FetchWithFallback(ctx, inflightKey, own, own)
				} else {
					r, err = b.Fetch(ctx, inflightKey, own)
				}
				return fetched{r, err}
			})
			o.Release()

			checkNotOld(t, "the caller that started the compute", within(t, started, 10*time.Second, "the first caller").v)
			checkNotOld(t, "a caller that began after InvalidateTags returned", within(t, joined, 10*time.Second, "the joiner").v)
			if n := b.Stats().Recomputed; n == 0 {
				t.Errorf("Recomputed %d on the computing replica", n)
			}
			holder.Release()
			if err := within(t, heldA, 10*time.Second, "A's call").v; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A load whose compute ended before InvalidateTags but whose fill is still
// under way (slow to encode here; a large value or a slow link is the same)
// answers nobody once the invalidation returned: neither its caller nor one
// that began after the invalidation returned and joined it. The stored
// copy was already refused by its stamp; the value is computed again. With
// L1 off and on; and a batch's key, whose fill is the batch's.
func TestInvalidateTagsReachesALoadInItsFill(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l1    int
		batch bool
	}{{"Fetch", 0, false}, {"Fetch/L1", 1000, false}, {"GetOrComputeMany", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := redistest.Prefix(t)
			gate := newGateCodec(t)
			b := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Hour, L1Size: tc.l1, L1TTL: time.Hour, Codec: gate})
			c := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Hour, L1Size: tc.l1, L1TTL: time.Hour})
			ctx := bounded(t, 30*time.Second)

			o := newTwoPhase(t)
			o.Release() // the compute ends at once; the fill is what is slow
			started := async(func() fetched {
				if !tc.batch {
					r, err := b.Fetch(ctx, inflightKey, o.fn)
					return fetched{r, err}
				}
				m, err := b.GetOrComputeMany(ctx, []string{inflightKey}, o.batch)
				return fetched{cache.Result[string]{Value: m[inflightKey]}, err}
			})
			within(t, gate.encoding, 10*time.Second, "the fill's encoding")
			if err := c.InvalidateTags(ctx, "t"); err != nil {
				t.Fatal(err)
			}
			var joined <-chan timed[fetched]
			if !tc.batch {
				joined = joinLoad(t, func() fetched {
					r, err := b.Fetch(ctx, inflightKey, func(context.Context) (string, error) { return "joiner's own", nil })
					return fetched{r, err}
				})
			}
			gate.Release()

			// Both are loaded again; whichever starts that load computes it.
			checkNotOld(t, "the caller that started the load", within(t, started, 10*time.Second, "the first caller").v, "joiner's own")
			if joined != nil {
				checkNotOld(t, "a caller that began after InvalidateTags returned", within(t, joined, 10*time.Second, "the joiner").v, "joiner's own")
			}
			for i, r := range []*cache.Cache[string]{b, c} {
				if v, found, err := r.Get(ctx, inflightKey); err != nil || found && v == "old" {
					t.Errorf("replica %d Get: %q %v %v", i, v, found, err)
				}
			}
		})
	}
}

// A compute done while Redis did not answer (Outcome Degraded) cannot learn
// of another replica's invalidation (docs/invalidation.md, "Failures and limits"), but its
// own replica's reaches it: when this replica's InvalidateTags returns nil
// while the compute runs, neither its caller nor a caller that began after
// the invalidation returned and joined it gets its value; nor the batch
// whose keys were computed so.
func TestOwnInvalidationReachesADegradedCompute(t *testing.T) {
	for _, first := range []string{"Fetch", "GetOrComputeMany"} {
		t.Run(first, func(t *testing.T) {
			ns := redistest.Prefix(t)
			p, rdb := proxiedClient(t, 500*time.Millisecond)
			// One Redis failure does not open the breaker: Redis is reachable
			// again for the invalidation, the compute is still the degraded one.
			b := newCache[string](t, rdb, cache.Options{Namespace: ns, TTL: time.Hour, RedisTimeout: 200 * time.Millisecond, BreakerThreshold: 1000})
			ctx := bounded(t, 30*time.Second)

			o := newTwoPhase(t)
			p.SetPartition(true)
			started := async(func() fetched {
				if first == "Fetch" {
					r, err := b.Fetch(ctx, inflightKey, o.fn)
					return fetched{r, err}
				}
				m, err := b.GetOrComputeMany(ctx, []string{inflightKey}, o.batch)
				return fetched{cache.Result[string]{Value: m[inflightKey]}, err}
			})
			within(t, o.started, 10*time.Second, "the degraded compute")
			p.SetPartition(false)
			// A pooled connection the partition left hung may still cost the
			// first invalidation its budget (ErrUnavailable): as documented,
			// the caller calls it again (bounded).
			againWhileUnavailable(t, "InvalidateTags after the partition healed", func() error { return b.InvalidateTags(ctx, "t") })
			var joined <-chan timed[fetched]
			if first == "Fetch" {
				joined = joinLoad(t, func() fetched {
					r, err := b.Fetch(ctx, inflightKey, func(context.Context) (string, error) { return "joiner's own", nil })
					return fetched{r, err}
				})
			}
			o.Release()

			// Both are loaded again; whichever starts that load computes it.
			checkNotOld(t, "the caller that started the compute", within(t, started, 10*time.Second, "the first caller").v, "joiner's own")
			if joined != nil {
				checkNotOld(t, "a caller that began after InvalidateTags returned", within(t, joined, 10*time.Second, "the joiner").v, "joiner's own")
			}
		})
	}
}

// A replica's own Set or Delete is seen by every call that begins on that
// replica after it returns (docs/guarantees.md, "Reads across replicas"), also while a
// load of the key is in flight there: a compute after WaitTimeout, or a
// fill still under way.
func TestOwnWriteReachesALoadInFlight(t *testing.T) {
	for _, load := range []string{"busy", "fill"} {
		for _, write := range []string{"Set", "Delete"} {
			t.Run(load+"/"+write, func(t *testing.T) {
				ns := redistest.Prefix(t)
				gate := newGateCodec(t)
				opts := cache.Options{Namespace: ns, TTL: time.Hour, WaitTimeout: 300 * time.Millisecond}
				a := newCache[string](t, redistest.Client(t), opts)
				opts.Codec = gate
				b := newCache[string](t, redistest.Client(t), opts)
				ctx := bounded(t, 30*time.Second)

				o := newTwoPhase(t)
				var heldA <-chan timed[error]
				holder := newHeld(t, "holder's")
				if load == "busy" {
					heldA = async(func() error { _, err := a.GetOrCompute(ctx, inflightKey, holder.fn); return err })
					within(t, holder.calls, 10*time.Second, "A's compute")
				} else {
					o.Release()
				}
				started := async(func() fetched { r, err := b.Fetch(ctx, inflightKey, o.fn); return fetched{r, err} })
				if load == "busy" {
					within(t, o.started, 10*time.Second, "B's compute after WaitTimeout")
				} else {
					within(t, gate.encoding, 10*time.Second, "the fill's encoding")
				}
				want := "after the write"
				if write == "Set" {
					if err := b.Set(ctx, inflightKey, want); err != nil {
						t.Fatal(err)
					}
				} else if err := b.Delete(ctx, inflightKey); err != nil {
					t.Fatal(err)
				}
				after := async(func() fetched {
					r, err := b.Fetch(ctx, inflightKey, func(context.Context) (string, error) { return want, nil })
					return fetched{r, err}
				})
				if f := within(t, after, 10*time.Second, "the call after the write").v; f.err != nil || f.r.Value != want {
					t.Errorf("a call begun after %s returned: %q (%v) %v, want %q", write, f.r.Value, f.r.Outcome, f.err, want)
				}
				o.Release()
				gate.Release()
				if f := within(t, started, 10*time.Second, "the first caller").v; f.err != nil {
					t.Errorf("the caller that started the load: %v", f.err)
				}
				holder.Release()
				if heldA != nil {
					if err := within(t, heldA, 10*time.Second, "A's call").v; err != nil && !errors.Is(err, context.Canceled) {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// SoftTimeout: the compute that goes on in the background after its
// callers were answered by the stale value fills when it ends; when its
// fill is still under way as InvalidateTags returns, the value it stores
// answers nobody afterwards, on any replica. (The stale value that stood
// in carries no invalidated tag: it may still stand in.)
func TestInvalidateTagsReachesASoftTimeoutFill(t *testing.T) {
	ns := redistest.Prefix(t)
	gate := newGateCodec(t)
	opts := cache.Options{Namespace: ns, TTL: time.Minute, StaleIfError: time.Hour, SoftTimeout: 50 * time.Millisecond, WaitTimeout: 10 * time.Second}
	c := newCache[string](t, redistest.Client(t), opts)
	opts.Codec = gate
	b := newCache[string](t, redistest.Client(t), opts)
	clk := cache.NewClock()
	cache.UseClock(b, clk)
	cache.UseClock(c, clk)
	ctx := bounded(t, 30*time.Second)

	if err := b.Set(ctx, inflightKey, "stale"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // expired, inside StaleIfError: it may stand in
	o := newTwoPhase(t)
	o.Release() // the compute ends at once; its fill is slow
	first := async(func() fetched { r, err := b.Fetch(ctx, inflightKey, o.fn); return fetched{r, err} })
	within(t, gate.encoding, 10*time.Second, "the background fill's encoding")
	if f := within(t, first, 10*time.Second, "the caller answered at SoftTimeout").v; f.err != nil || f.r.Value != "stale" || !errors.Is(f.r.Err, cache.ErrSoftTimeout) {
		t.Fatalf("at SoftTimeout: %+v %v", f.r, f.err)
	}
	if err := c.InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	for i, r := range []*cache.Cache[string]{b, c} {
		if v, found, err := r.Get(ctx, inflightKey); err != nil || found && v == "old" {
			t.Errorf("replica %d Get: %q %v %v", i, v, found, err)
		}
		f := within(t, async(func() fetched { r, err := r.Fetch(ctx, inflightKey, o.fn); return fetched{r, err} }), 20*time.Second, "a call after the invalidation").v
		checkNotOld(t, fmt.Sprintf("replica %d Fetch after InvalidateTags returned", i), f, "stale")
	}
}
