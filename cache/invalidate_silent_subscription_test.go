package cache_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A replica whose invalidation subscription falls silent (its connection
// black-holed, no error seen) loses the announcements and the answers to
// its heartbeats alike: its marks are no longer vouched for once its last
// answered heartbeat is InvalidationWait old, so after InvalidateTags
// returns it reads them again and refuses the invalidated value, as it
// would with no subscription at all.
func TestInvalidationReachesAReplicaWhoseSubscriptionFellSilent(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	ns := redistest.Prefix(t)
	admin := redistest.Client(t)
	p := newProxy(t)
	var dials atomic.Int32
	var d net.Dialer
	// b's first connection, its subscription's (New dials it before any
	// command), goes through the proxy; its commands do not.
	brdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return d.DialContext(ctx, network, p.Addr())
		}
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = brdb.Close() })
	opts := cache.Options{Namespace: ns}
	a := newCache[string](t, redistest.Client(t), opts)
	b := newCache[string](t, brdb, opts)
	pollFor(t, "both invalidation subscriptions", 10*time.Second, time.Millisecond, func() bool {
		return numsub(t, admin, "stampede:{"+ns+"}:invalidate") >= 2
	})
	tagged := func(v string) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			cache.SetTags(ctx, "t")
			return v, nil
		}
	}
	if v, err := b.GetOrCompute(ctx, "k", tagged("old")); err != nil || v != "old" {
		t.Fatalf("b: %q %v", v, err)
	}
	// Past the first reads' own trust, so that b's marks are read again
	// after a heartbeat answered: vouched for by the subscription.
	time.Sleep(3 * defaultInvalidationWait)
	if v, _, err := b.Get(ctx, "k"); err != nil || v != "old" {
		t.Fatalf("b: %q %v", v, err)
	}
	p.SetPartition(true) // b's subscription falls silent: nothing arrives, nothing breaks
	if err := a.InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if v, found, err := b.Get(ctx, "k"); err != nil || found {
		t.Fatalf("b after the invalidation returned: %q found=%v %v", v, found, err)
	}
	if v, err := b.GetOrCompute(ctx, "k", tagged("new")); err != nil || v != "new" {
		t.Fatalf("b recomputes: %q %v", v, err)
	}
}
