package cache_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Read-after-write with L1: once Set or Delete returns, the replica that ran
// it never answers the old value from L1 or Redis, on any read path, and
// other replicas stop once the invalidation arrives; the same without L1.

// l1Synced waits until c's L1 serves hits (its invalidation subscription is
// confirmed), so the L1 tests exercise L1 and do not pass for want of it.
func l1Synced(t *testing.T, c *cache.Cache[string]) {
	t.Helper()
	ctx := bounded(t, 10*time.Second)
	eventually(t, 5*time.Second, func() bool {
		if err := c.Set(ctx, "l1-warm-up", "w"); err != nil {
			t.Fatal(err)
		}
		_, _, _ = c.Get(ctx, "l1-warm-up")
		return c.Stats().L1Hits > 0
	}, func() string { return fmt.Sprintf("L1 never served a hit: %+v", c.Stats()) })
}

// Issue 14, defect 2: after Delete or Set returns, the replica that ran it
// never serves the old value from L1, and other replicas stop serving it once
// the invalidation arrives. Replica A runs 200 rounds of Set(v-r) then
// Delete while 8 readers on A and 4 on B hammer the key with Get and
// GetOrCompute, so that reads answered by Redis just before each write land
// in L1 just after it. floor records, after each write returns, which
// versions are outdated; a reader on A that started after a write returned
// and got an outdated version is a violation. L1TTL is a minute, so an entry
// put back below the floor would be served for the rest of the test.
func TestL1NeverServesOldValueAfterWrite(t *testing.T) {
	t.Parallel()
	readAfterWrite(t, cache.Options{L1Size: 1000, L1TTL: time.Minute, TTL: time.Hour})
}

// Issue 14, defect 2, the same without L1: a read on the writing replica
// that starts after Delete/Set returned must not be answered by a GET (or a
// load) that another caller of the process started before the write. This
// is beyond the letter of the contract (which speaks of L1), but the same
// promise; on today's main it fails at the writer's own Get about 1 time
// in 8, because hit-path GETs of one key are shared: if it fails with L1 on
// and off alike, the cause is the sharing, not L1.
func TestReadAfterWriteWithoutL1(t *testing.T) {
	readAfterWrite(t, cache.Options{TTL: time.Hour})
}

func readAfterWrite(t *testing.T, opts cache.Options) {
	rs := replicas[string](t, 2, opts)
	a, b := rs[0], rs[1]
	if opts.L1Size > 0 {
		trackForL1(t, a, "k")
		trackForL1(t, b, "k")
	}
	const key = "k"
	// floor: after Set of version r returns, 2r (versions < r are old);
	// after the Delete of round r returns, 2r+1 (versions <= r are old).
	var floor atomic.Int64
	floor.Store(-1)
	outdated := func(v string, f int64) bool {
		n, ok := versionOf(v)
		return ok && int64(2*n+1) <= f
	}
	fn := func(context.Context) (string, error) { return "computed", nil }

	var violations, reads atomic.Int64
	var firstViolation atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	reader := func(c *cache.Cache[string], strict bool, useGet bool) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			f := floor.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var v string
			var err error
			if useGet {
				v, _, err = c.Get(ctx, key)
			} else {
				v, err = c.GetOrCompute(ctx, key, fn)
			}
			cancel()
			reads.Add(1)
			if err == nil && strict && outdated(v, f) {
				violations.Add(1)
				firstViolation.CompareAndSwap(nil, fmt.Sprintf("read %q after the write at floor %d returned", v, f))
			}
		}
	}
	for i := range 8 {
		wg.Go(func() { reader(a, true, i%2 == 0) })
	}
	for i := range 4 {
		wg.Go(func() { reader(b, false, i%2 == 0) })
	}

	writerViolations := 0
	for r := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.Set(ctx, key, versioned(r)); err != nil {
			cancel()
			t.Fatalf("set %d: %v", r, err)
		}
		floor.Store(int64(2 * r))
		if err := a.Delete(ctx, key); err != nil {
			cancel()
			t.Fatalf("delete %d: %v", r, err)
		}
		floor.Store(int64(2*r + 1))
		// The writer's own read right after Delete returned.
		if v, found, err := a.Get(ctx, key); err == nil && found && outdated(v, int64(2*r+1)) {
			writerViolations++
		}
		cancel()
	}
	close(stop)
	waitGroupWithin(t, &wg, 10*time.Second, "the readers stopping")
	if writerViolations > 0 || violations.Load() > 0 {
		t.Errorf("replica A served a value after the Delete/Set replacing it returned: %d of 200 Deletes followed by the deleted value at the writer, %d of %d concurrent reads outdated (first: %v)",
			writerViolations, violations.Load(), reads.Load(), firstViolation.Load())
	}

	// Quiet now: one last Delete. B must stop serving the old value once its
	// invalidation arrives (well within 2 s on loopback; L1TTL is a minute).
	last := versioned(1000)
	if err := a.Set(bounded(t, 5*time.Second), key, last); err != nil {
		t.Fatal(err)
	}
	// B may serve what its L1 holds until the Set's invalidation arrives;
	// then it reads the last value (and holds it in L1).
	var seenB string
	eventually(t, 2*time.Second, func() bool {
		v, err := b.GetOrCompute(bounded(t, 5*time.Second), key, fn)
		seenB = fmt.Sprint(v, " ", err)
		return err == nil && v == last
	}, func() string { return "replica B never served the last Set's value: " + seenB })
	if err := a.Delete(bounded(t, 5*time.Second), key); err != nil {
		t.Fatal(err)
	}
	var seen string
	eventually(t, 2*time.Second, func() bool {
		v, found, err := b.Get(bounded(t, 5*time.Second), key)
		seen = fmt.Sprint(v, found, err)
		return err == nil && !found
	}, func() string { return "replica B still serves the deleted value (L1): " + seen })
	for i := range 100 {
		if v, found, err := b.Get(bounded(t, 5*time.Second), key); err != nil || found {
			t.Fatalf("B read %d after the invalidation arrived: %q found=%v err=%v", i, v, found, err)
		}
	}
	if v, found, _ := a.Get(bounded(t, 5*time.Second), key); found {
		t.Fatalf("A after its last Delete: %q", v)
	}
}

// Pins (guarantee 3 with L1, batch and single paths): readers hammer a key
// through GetOrComputeMany, Get and Fetch while the writer Sets v-n and then
// Deletes it; right after Delete returns, the writer's own replica must not
// answer v-n from any path.
func TestL1NoOldValueAfterDeleteOnAnyPath(t *testing.T) {
	t.Parallel()
	caches := replicas[string](t, 1, cache.Options{L1Size: 1000, TTL: time.Hour})
	w := caches[0]
	ctx := bounded(t, 60*time.Second)
	eventually(t, 5*time.Second, func() bool {
		_ = w.Set(ctx, "warm", "x")
		_, _, _ = w.Get(ctx, "warm")
		return w.Stats().L1Hits > 0
	}, func() string { return "L1 never synced" })
	var stop atomic.Bool
	var wg sync.WaitGroup
	compute := func(context.Context) (string, error) { return "computed", nil }
	for g := range 6 {
		wg.Go(func() {
			for !stop.Load() {
				switch g % 3 {
				case 0:
					_, _ = w.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
						return map[string]string{"k": "computed"}, nil
					})
				case 1:
					_, _, _ = w.Get(ctx, "k")
				default:
					_, _ = w.Fetch(ctx, "k", compute)
				}
			}
		})
	}
	bad := 0
	for n := range 100 {
		if err := w.Set(ctx, "k", versioned(n)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // let readers pick the value up
		if err := w.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		m, _ := w.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
			return map[string]string{"k": "computed"}, nil
		})
		v, found, _ := w.Get(ctx, "k")
		r, _ := w.Fetch(ctx, "k", compute)
		if m["k"] == versioned(n) || (found && v == versioned(n)) || r.Value == versioned(n) {
			bad++
		}
		_ = w.Delete(ctx, "k")
	}
	stop.Store(true)
	waitGroupWithin(t, &wg, 10*time.Second, "readers stopping")
	if bad > 0 {
		t.Fatalf("%d of 100 Deletes followed by the deleted value on this replica", bad)
	}
}
