package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A caller whose deadline ends while its answer's fence reads the marks
// gets its deadline's error, not the value: the fence could not check it,
// and its caller's deadline, not Redis, cut the read. It used to get the
// value unchecked, as when Redis is down, although another replica's
// InvalidateTags had returned before the answer (robustness
// redis-slow-fill, seed 1796613053753534701: a Fetch answered 9 ms after a
// Clear returned, "invalidation marks unreadable; the answer goes
// unchecked", context deadline exceeded).
func TestAnAnswerWhoseFenceOutlivesItsCallersDeadlineIsNotServed(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p, sub := newProxy(t), newProxy(t)
			ns := redistest.Prefix(t)
			// Its subscription falls silent (sub): no heartbeat's answer
			// vouches for the marks or shows a new round trip, as on a
			// Cluster; its commands, marks reads included, go through p.
			rdb := unsubscribedClient(t, cfg.opts, p, sub)
			// A budget a loaded machine meets (under -race beside two CPU
			// hogs a 250 ms one let a step pass for silence, and the far
			// replica answered degraded: a value computed without the
			// fleet, which the fence does not judge). The marks reads are
			// bounded by InvalidationWait and the round trip, not by it.
			opts := cache.Options{Namespace: ns, RedisTimeout: 2 * time.Second, WaitTimeout: 5 * time.Second}
			far := newCache[string](t, rdb, opts)
			near := newCache[string](t, redistest.Client(t), opts)
			sub.SetPartition(true)
			entered, release := make(chan struct{}), make(chan struct{})
			// The caller's deadline: a second after its compute returns
			// (set then, so that a loaded machine's slow read and claim
			// before the compute cannot use it up).
			ctx, cancel := context.WithCancelCause(bounded(t, 30*time.Second))
			defer cancel(nil)
			got := async(func() fetched {
				r, err := far.Fetch(ctx, "k", func(ctx context.Context) (string, error) {
					close(entered)
					<-release
					return "before", cache.SetTags(ctx, "t")
				})
				return fetched{r, err}
			})
			select {
			case <-entered:
			case r := <-got:
				t.Fatalf("the fetch ended before its compute ran: %v", r.v.err)
			}
			if err := near.InvalidateTags(bounded(t, 10*time.Second), "t"); err != nil {
				t.Fatal(err)
			}
			// From now on the far replica's marks reads get no answer
			// before its caller's deadline, while Redis answers the rest.
			p.SetSlowCommand("hmget", time.Second)
			t.Cleanup(func() { p.SetSlowCommand("", 0) })
			// Redis answers the far replica's other steps meanwhile (Gets
			// of a key never written: no marks read), so its fence reads
			// on (load, not silence) until its caller's deadline.
			stop, others := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(others)
				for i := 0; i < 1000; i++ { // bounded: 1000 × 10 ms
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond): // the other calls' pace, not a wait for an event
					}
					_, _, _ = far.Get(context.Background(), "other")
				}
			}()
			defer func() { close(stop); <-others }()
			close(release)
			deadline := time.AfterFunc(time.Second, func() { cancel(context.DeadlineExceeded) })
			defer deadline.Stop()
			r := within(t, got, 20*time.Second, "the far replica's fetch").v
			if r.err == nil {
				t.Fatalf("answered %q (outcome %s) past its caller's deadline, unchecked, after an InvalidateTags had returned", r.r.Value, r.r.Outcome)
			}
			if !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("error %v, want the caller's deadline", r.err)
			}
		})
	}
}
