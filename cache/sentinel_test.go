package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Behind Sentinel, the master dies while a holder computes and 150 callers
// on three other processes wait: the Sentinels promote the replica, the
// clients follow, the waiters' subscriptions move to the new master, and the
// holder's fill reaches them, whether it finishes after the promotion or
// during the outage (then it is retried until the new master answers). No
// caller sees an error; the origin runs at most twice (twice only if the
// lease had not reached the replica, which is asynchronous).
func TestSentinelFailoverMidStorm(t *testing.T) {
	t.Parallel()
	for _, during := range []bool{false, true} {
		name := "fill after the promotion"
		if during {
			name = "fill during the outage"
		}
		t.Run(name, func(t *testing.T) {
			d := redistest.NewSentinel(t)
			ns := redistest.Prefix(t)
			// WaitTimeout covers the failover (1 s to notice, then the election).
			caches := replicasOn[string](t, 4, func(t testing.TB) redis.UniversalClient { return redistest.FailoverClient(t, d) },
				cache.Options{Namespace: ns, WaitTimeout: 30 * time.Second})
			s := startHeldStorm(t, caches, ns, "k", 50)
			await(t, "3 subscribers on the master", func() bool { return redistest.PlainSubscribers(t, d.Master.Addr(), s.channel) == 3 })
			if err := d.Master.Stop(); err != nil {
				t.Fatal(err)
			}
			if during {
				s.finish()
			}
			await(t, "the replica promoted", func() bool { return masterAddr(t, d) == d.Replica.Addr() })
			if !during {
				await(t, "the waiters subscribed on the new master", func() bool {
					return redistest.PlainSubscribers(t, d.Replica.Addr(), s.channel) == 3
				})
				s.finish()
			}
			if n := s.o.calls.Load(); n > 2 || s.errs.Load() != 0 {
				t.Fatalf("origin ran %d times, %d errors", n, s.errs.Load())
			}
			// The value is on the new master: the next callers hit it.
			for _, c := range caches {
				if r, err := c.Fetch(context.Background(), "k", s.o.fn); err != nil || r.Value != s.o.value || r.Outcome != cache.Hit {
					t.Fatalf("after the failover: %+v %v", r, err)
				}
			}
			t.Logf("sentinel failover, %s: origin calls %d, caller errors 0, degraded %d, refills %d",
				name, s.o.calls.Load(), total(caches, degraded), total(caches, refills))
		})
	}
}

// masterAddr asks a Sentinel which address the master has now.
func masterAddr(t *testing.T, d *redisserver.Sentinel) string {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: d.Sentinels[0].Addr()})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a, err := sc.GetMasterAddrByName(ctx, redisserver.SentinelMaster).Result()
	if err != nil || len(a) != 2 {
		return ""
	}
	return a[0] + ":" + a[1]
}
