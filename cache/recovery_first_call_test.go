package cache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The first call after an outage healed, once the breaker's cooldown is
// over, is answered through Redis, not degraded (issue 39, item 4). That
// call starts the breaker's probe; before, it answered without Redis at
// once and left the probe to close the breaker for the calls after it, so
// a process whose calls came one cooldown apart, or fewer than the probe's
// round trip, answered degraded after every outage. Now it waits for the
// probe's verdict, up to one budget. Each outage here is healed five times
// over, with pooled connections that died in it: Redis restarted (its
// connections closed, Redis refusing new ones meanwhile), or black-holed
// and then let through (the client's pending reads timed out meanwhile).
func TestFirstCallAfterAnOutageHealedIsNotDegraded(t *testing.T) {
	const cooldown = 30 * time.Millisecond
	for _, outage := range []string{"redis restarted", "black hole healed"} {
		for _, cl := range recoveryClients {
			t.Run(outage+"/"+cl.name, func(t *testing.T) {
				srv, err := redisserver.Start(redisserver.Options{})
				if err != nil {
					redistest.Server(t) // skips, or fails under CI
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = srv.Close() })
				proxy, err := faultproxy.New(srv.Addr())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = proxy.Close() })
				o := cl.opts
				o.Addr = proxy.Addr()
				rdb := redis.NewClient(&o)
				t.Cleanup(func() { _ = rdb.Close() })
				c := newCache[int](t, rdb, cache.Options{RedisTimeout: 500 * time.Millisecond, BreakerThreshold: 1, BreakerCooldown: cooldown})
				ctx := context.Background()
				fn := func(context.Context) (int, error) { return 1, nil }
				for round := range 5 {
					for i := range 4 { // pooled connections for the outage to kill
						if r, err := c.Fetch(ctx, fmt.Sprintf("warm-%d-%d", round, i), fn); err != nil || r.Outcome != cache.Miss {
							t.Fatalf("round %d: a call before the outage: %v %v", round, r.Outcome, err)
						}
					}
					if outage == "redis restarted" {
						if err := srv.Stop(); err != nil {
							t.Fatal(err)
						}
					} else {
						proxy.SetPartition(true)
					}
					if r, err := c.Fetch(ctx, fmt.Sprintf("during-%d", round), fn); err != nil || r.Outcome != cache.Degraded || !c.Stats().BreakerOpen {
						t.Fatalf("round %d: the call in the outage: %v %v, breaker open %v; want degraded and the breaker open", round, r.Outcome, err, c.Stats().BreakerOpen)
					}
					if outage == "redis restarted" {
						if err := srv.Restart(); err != nil {
							t.Fatal(err)
						}
					} else {
						proxy.SetPartition(false)
					}
					time.Sleep(cooldown) // the cooldown's own length: time passing, not a wait for an event
					r, err := c.Fetch(ctx, fmt.Sprintf("after-%d", round), fn)
					if err != nil || r.Outcome != cache.Miss {
						t.Fatalf("round %d: the first call after the outage healed and the cooldown ended: %v %v, want a miss through Redis (stats %+v)",
							round, r.Outcome, err, c.Stats())
					}
					if c.Stats().BreakerOpen {
						t.Fatalf("round %d: breaker open after a call through Redis", round)
					}
				}
			})
		}
	}
}
