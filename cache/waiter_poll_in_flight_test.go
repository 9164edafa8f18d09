package cache_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A waiter answers with the value its notification carries the moment the
// notification arrives, even while its safety-net poll is in flight: the
// poll's round trips do not hold it up (issue 39 item 5: at a 40 ms round
// trip, a waiter came back 1.4–2.5 round trips after the leader of a long
// compute, while its poll's GET and claim were answered). Replica B's
// requests to Redis go through a proxy that holds them (its poll's GET
// stays in flight) while what Redis sends it, the fill's notification,
// still arrives; B's RedisTimeout is 20 s, so a waiter that waits for its
// poll cannot answer within the 10 s the test gives it. For a single key
// (GetOrCompute) and a batch's key (GetOrComputeMany).
func TestNotificationAnswersAWaiterWhosePollIsInFlight(t *testing.T) {
	for _, call := range []string{"GetOrCompute", "GetOrComputeMany"} {
		t.Run(call, func(t *testing.T) {
			ns := redistest.Prefix(t)
			ctx := bounded(t, 60*time.Second)
			a := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Hour})
			p := newProxy(t)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			gets := &getsInFlight{}
			rdb.AddHook(gets)
			b := newCache[string](t, rdb, cache.Options{Namespace: ns, TTL: time.Hour,
				WaitTimeout: 30 * time.Second, RedisTimeout: 20 * time.Second,
				// B's marks stay trusted by the read below while its requests are held.
				InvalidationWait: 20 * time.Second})
			// B's scripts loaded and its namespace mark read.
			if _, err := b.GetOrCompute(ctx, "warm", func(context.Context) (string, error) { return "w", nil }); err != nil {
				t.Fatal(err)
			}

			h := newHeld(t, "A's value")
			heldA := async(func() error { _, err := a.GetOrCompute(ctx, "k", h.fn); return err })
			within(t, h.calls, 10*time.Second, "A's compute")
			before := waits()
			waiter := async(func() valErr[string] {
				if call == "GetOrCompute" {
					r, err := b.Fetch(ctx, "k", func(context.Context) (string, error) { return "B's own", nil })
					if err == nil && r.Outcome != cache.Waited {
						t.Errorf("outcome %v, want Waited", r.Outcome)
					}
					return valErr[string]{r.Value, err}
				}
				m, err := b.GetOrComputeMany(ctx, []string{"k"}, func(_ context.Context, keys []string) (map[string]string, error) {
					return map[string]string{"k": "B's own"}, nil
				})
				return valErr[string]{m["k"], err}
			})
			eventually(t, 10*time.Second, func() bool { return waits() > before }, func() string {
				return "B did not get to waiting"
			})
			p.SetHoldRequests(true)
			held := gets.sent.Load()
			// B's poll held: a GET sent after the hold, or a request of a
			// poll sent just before it (its GET, or its claim attempt)
			// that the proxy had not forwarded yet: the waiter sends no
			// other poll while that one is in flight (with two CPU hogs
			// beside the suite, CI9 waited 10 s for a new GET).
			eventually(t, 10*time.Second, func() bool {
				return gets.sent.Load() > held || p.InFlight() > 0
			}, func() string {
				return "B sent no poll while its requests were held"
			})
			h.Release()
			if err := within(t, heldA, 10*time.Second, "A's call").v; err != nil {
				t.Fatal(err)
			}
			got := within(t, waiter, 10*time.Second, "B's answer while its poll is held in flight").v
			if got.err != nil || got.v != "A's value" {
				t.Errorf("B: %q %v, want A's value", got.v, got.err)
			}
			if n := gets.answered.Load(); n > held {
				t.Errorf("%d GETs answered while B's requests were held (%d sent before)", n, held)
			}
			p.SetHoldRequests(false)
			// The poll left in flight ends once its GET is answered.
			eventually(t, 10*time.Second, func() bool { return gets.answered.Load() == gets.sent.Load() }, func() string {
				return "B's held poll did not end after the release"
			})
		})
	}
}

// waits counts the goroutines of the test's process in a wait for another
// replica's fill.
func waits() int { return leakcheck.CountFrames("stampede/cache.(*Cache[...]).wait(") }

// getsInFlight counts the GETs a client sent and those answered.
type getsInFlight struct{ sent, answered atomic.Int64 }

func (g *getsInFlight) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *getsInFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "get" {
			return next(ctx, cmd)
		}
		g.sent.Add(1)
		defer g.answered.Add(1)
		return next(ctx, cmd)
	}
}

func (g *getsInFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := int64(0)
		for _, c := range cmds {
			if c.Name() == "get" {
				n++
			}
		}
		g.sent.Add(n)
		defer g.answered.Add(n)
		return next(ctx, cmds)
	}
}
