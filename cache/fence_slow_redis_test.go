package cache_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The fence holds against a compute in flight when Redis turns slow within
// InvalidationWait δ (issue 39, item 2): Redis 90 ms away each way from the
// computing replica (its subscription's heartbeat answered later than δ,
// so its marks are trusted by reads alone) and δ = 100 ms. With
// ContextTimeoutEnabled each fence read used to be cut at its bound, δ, at
// the socket: no reply, so nothing taught the Redis budget the new round
// trip, all four reads failed alike, the verdict was Unknown, and the
// caller got the value computed before an InvalidateTags that had
// returned. With go-redis' defaults the first read's late reply taught it,
// and the third read held.
func TestFenceHoldsWhenRedisTurnsSlowWithinInvalidationWait(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			p, sub := newProxy(t), newProxy(t)
			ns := redistest.Prefix(t)
			// Its subscription falls silent (sub): no heartbeat's answer
			// vouches for the marks or shows a new round trip, as on a
			// Cluster; its commands, marks reads included, go through p.
			rdb := unsubscribedClient(t, cfg.opts, p, sub)
			opts := cache.Options{Namespace: ns, RedisTimeout: 250 * time.Millisecond, InvalidationWait: 100 * time.Millisecond}
			far := newCache[string](t, rdb, opts)
			near := newCache[string](t, redistest.Client(t), opts)
			ctx := bounded(t, 30*time.Second)
			sub.SetPartition(true)
			for round := range 3 {
				p.SetLatency(0)
				key := fmt.Sprint("k", round)
				// Warm: Redis answers this replica fast, as it did before it slowed.
				if _, err := far.Fetch(ctx, fmt.Sprint("warm", round), func(context.Context) (string, error) { return "w", nil }); err != nil {
					t.Fatal(err)
				}
				entered, release := make(chan struct{}), make(chan struct{})
				var calls atomic.Int64
				origin := func(ctx context.Context) (string, error) {
					n := calls.Add(1)
					if n == 1 {
						close(entered)
						<-release
					}
					return fmt.Sprint("v", n), cache.SetTags(ctx, "t")
				}
				got := async(func() fetched {
					r, err := far.Fetch(ctx, key, origin)
					return fetched{r, err}
				})
				<-entered
				p.SetLatency(90 * time.Millisecond) // a 180 ms round trip; one way below δ
				if err := near.InvalidateTags(ctx, "t"); err != nil {
					t.Fatal(err)
				}
				close(release)
				r := within(t, got, 20*time.Second, "the far replica's fetch").v
				if r.err == nil && r.r.Value == "v1" {
					t.Fatalf("round %d: the far replica answered %q, computed before an InvalidateTags that had returned (outcome %s)", round, r.r.Value, r.r.Outcome)
				}
			}
		})
	}
}
