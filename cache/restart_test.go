package cache_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Redis restarts in the middle of a storm, without persistence (data lost)
// and with AOF (data kept): callers get right values or their own compute,
// never a wrong value, and the cache recovers on its own.
func TestRedisRestartMidStorm(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		kept bool
	}{
		{"no persistence", nil, false},
		{"aof", []string{"--appendonly", "yes", "--appendfsync", "always"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := redisserver.Start(redisserver.Options{Args: tc.args})
			if err != nil {
				redistest.Server(t)
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			var caches []*cache.Cache[string]
			for range 3 {
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond,
					ReadTimeout: 500 * time.Millisecond})
				t.Cleanup(func() { _ = rdb.Close() })
				caches = append(caches, newCache[string](t, rdb, cache.Options{BreakerThreshold: 3, BreakerCooldown: 20 * time.Millisecond, Namespace: "restart"}))
			}
			ctx := context.Background()
			var calls atomic.Int32
			fn := func(context.Context) (string, error) { calls.Add(1); return "right", nil }
			if _, err := caches[0].GetOrCompute(ctx, "k", fn); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wrong, failed atomic.Int32
			var wg sync.WaitGroup
			for _, c := range caches {
				for range 20 {
					wg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							v, err := c.GetOrCompute(ctx, "k", fn)
							switch {
							case err != nil:
								failed.Add(1)
							case v != "right":
								wrong.Add(1)
							}
						}
					})
				}
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			// Recovered: every replica answers from Redis again.
			for _, c := range caches {
				waitFor(t, "recovery", func() bool {
					r, err := c.Fetch(ctx, "k", fn)
					return err == nil && r.Outcome != cache.Degraded && !c.Stats().BreakerOpen
				})
			}
			close(stop)
			wg.Wait()
			if wrong.Load() != 0 || failed.Load() != 0 {
				t.Fatalf("wrong values %d, errors %d", wrong.Load(), failed.Load())
			}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			if tc.kept {
				// With AOF the value survived, and it is the key's only
				// Redis key: no lease outlives its compute.
				if n, err := rdb.Exists(ctx, "{restart:k}:v", "{restart:k}:l").Result(); err != nil || n != 1 {
					t.Fatalf("AOF kept %d keys, want the value alone: %v", n, err)
				}
			}
			var degraded uint64
			for _, c := range caches {
				degraded += c.Stats().Degraded
			}
			t.Logf("%s: origin calls %d, degraded answers %d", tc.name, calls.Load(), degraded)
		})
	}
}

// A failover to a replica that had not received the lease (replication is
// asynchronous) or a restart without persistence loses the lease while a
// holder computes: a second holder takes the lease. Lease tokens are random,
// so the two holders never share one: the first one's late fill finds
// another token (or none) and is rejected; it cannot overwrite the newer
// value.
func TestLostLeaseFencesOutTheOldHolder(t *testing.T) {
	ns := redistest.Prefix(t)
	rs := replicas[string](t, 2, cache.Options{Namespace: ns, WaitTimeout: time.Minute})
	rdb := redistest.Client(t)
	ctx := context.Background()
	old := &origin[string]{value: "computed first", started: make(chan struct{}, 1), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		v, err := rs[0].GetOrCompute(ctx, "k", old.fn)
		if err == nil && v != old.value {
			err = fmt.Errorf("the old holder's caller got %q", v)
		}
		done <- err
	}()
	<-old.started
	// What the promoted replica lacks: the lease.
	if err := rdb.Del(ctx, "{"+ns+":k}:l").Err(); err != nil {
		t.Fatal(err)
	}
	v, err := rs[1].GetOrCompute(ctx, "k", func(context.Context) (string, error) { return "computed second", nil })
	if err != nil || v != "computed second" {
		t.Fatalf("second holder: %q %v", v, err)
	}
	close(old.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := rs[0].Stats().FencedOut; n != 1 {
		t.Fatalf("the old holder's fill was not fenced out (%d)", n)
	}
	if v, _, err := rs[1].Get(ctx, "k"); err != nil || v != "computed second" {
		t.Fatalf("stored value %q %v: the older compute overwrote the newer", v, err)
	}
}
