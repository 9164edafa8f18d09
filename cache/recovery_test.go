package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// recoveryClients are the go-redis options the recovery tests run with:
// go-redis' defaults, and the options the README recommends.
var recoveryClients = []struct {
	name string
	opts redis.Options
}{
	{"go-redis defaults", redis.Options{}},
	{"README options", redis.Options{ContextTimeoutEnabled: true, DialTimeout: time.Second,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: 1}},
}

// Once an outage has healed and the breaker's probe has closed it, no call
// is degraded by a connection that died during the outage: neither when
// Redis restarted on the same host (its connections were closed, and
// go-redis' check of an idle connection sees it), nor when they died
// without the client's kernel being told (the host restarted, a failover
// moved the address, a proxy or NAT forgot them: the proxy's Vanish). In
// the second case go-redis keeps them, in its main pool and in the pool of
// its pipelines, which the probe's PING never touches: each used to cost a
// call (a degraded answer, counted against the breaker) until the pools
// were rid of them, one call in five in the report.
func TestCallsAfterAnOutageAreNotDegraded(t *testing.T) {
	for _, outage := range []struct {
		name   string
		vanish bool
	}{
		{"redis restarted", false},
		{"connections vanished", true},
	} {
		for _, cl := range recoveryClients {
			t.Run(outage.name+"/"+cl.name, func(t *testing.T) {
				t.Parallel() // each with a redis-server of its own
				srv, err := redisserver.Start(redisserver.Options{})
				if err != nil {
					redistest.Server(t) // skips, or fails under CI
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = srv.Close() })
				addr := srv.Addr()
				var proxy *faultproxy.Proxy
				if outage.vanish {
					if proxy, err = faultproxy.New(addr); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = proxy.Close() })
					addr = proxy.Addr()
				}
				o := cl.opts
				o.Addr = addr
				rdb := redis.NewClient(&o)
				t.Cleanup(func() { _ = rdb.Close() })
				c := newCache[int](t, rdb, cache.Options{BreakerThreshold: 2, BreakerCooldown: 20 * time.Millisecond})
				ctx := context.Background()
				fn := func(context.Context) (int, error) { return 1, nil }

				// Concurrent misses fill both of go-redis' pools: reads and
				// scripts take the main pool, claims the pipelines' pool.
				var wg sync.WaitGroup
				for g := range 40 {
					wg.Go(func() {
						for i := range 20 {
							_, _ = c.GetOrCompute(ctx, fmt.Sprintf("warm-%d-%d", g, i), fn)
						}
					})
				}
				wg.Wait()
				st := rdb.PoolStats()
				if st.IdleConns < 2 || st.PipelineStats == nil || st.PipelineStats.IdleConns < 2 {
					t.Fatalf("the warm-up left too few pooled connections to test: %+v, pipelines %+v", st, st.PipelineStats)
				}

				if outage.vanish {
					proxy.Vanish()
				}
				if err := srv.Stop(); err != nil {
					t.Fatal(err)
				}
				pollFor(t, "the breaker to open", 30*time.Second, time.Millisecond, func() bool {
					_, _ = c.Fetch(ctx, "during", fn)
					return c.Stats().BreakerOpen
				})
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
				pollFor(t, "the probe to close the breaker", 30*time.Second, time.Millisecond, func() bool {
					_, _ = c.Fetch(ctx, "during", fn) // past the cooldown, a call starts the probe
					return !c.Stats().BreakerOpen
				})

				before := c.Stats()
				for i := range 30 { // a miss (claim, fill) then a hit (read)
					for _, want := range []cache.Outcome{cache.Miss, cache.Hit} {
						r, err := c.Fetch(ctx, fmt.Sprintf("after-%d", i), fn)
						if err != nil || r.Outcome != want {
							t.Fatalf("sequential call %d after the breaker closed: %v %v, want %v; pools %+v",
								i, r.Outcome, err, want, rdb.PoolStats())
						}
					}
				}
				for g := range 8 {
					wg.Go(func() {
						for i := range 10 {
							r, err := c.Fetch(ctx, fmt.Sprintf("concurrent-%d-%d", g, i), fn)
							if err != nil || r.Outcome == cache.Degraded {
								t.Errorf("concurrent call after the breaker closed: %v %v", r.Outcome, err)
							}
						}
					})
				}
				wg.Wait()
				if after := c.Stats(); after.Degraded != before.Degraded || after.BreakerOpen {
					t.Fatalf("after the breaker closed: %d calls degraded, breaker open %v",
						after.Degraded-before.Degraded, after.BreakerOpen)
				}
			})
		}
	}
}
