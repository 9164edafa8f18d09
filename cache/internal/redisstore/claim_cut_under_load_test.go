package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A claim cut at its budget while Redis answers the process's other steps
// (a client that honours deadlines runs it inline, cut on the socket at
// RedisTimeout: a slowed link, a loaded machine) is sent again with its
// token, on the budget that backed off, and waited for: it wins, as the
// claim Redis ran the first time is the caller's own. It used to fail as
// load, and its caller, taking Redis's slowness for an outage, computed
// without the fleet (a batch's value then answered through the other
// replicas' invalidations: issue 39 item 10, redis-slow-fill).
func TestAClaimCutUnderLoadIsSentAgainWithItsToken(t *testing.T) {
	p, err := faultproxy.New(redistest.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ns := redistest.Prefix(t)
	r := &reports{}
	s := storeOn(t, rdb, ns, r, func(string, func(context.Context)) {}, func(c *Config) {
		c.RedisTimeout, c.WaitTimeout, c.ErrRedisTimeout = 100*time.Millisecond, 3*time.Second, errors.New("test: past the budget")
	})
	ctx := context.Background() // cannot be cancelled: the claim runs inline
	// Redis answers the process's other steps (marks reads) at once while
	// the claims' scripts and their replies are 90 ms slower each way: a
	// round trip past the budget, as on a Cluster node turned slow.
	stop, other := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(other)
		for i := 0; i < 1000; i++ { // bounded: 1000 × 10 ms
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond): // the other steps' pace, not a wait for an event
			}
			_, _ = s.ReadMarks(ctx, []string{"t"})
		}
	}()
	defer func() { close(stop); <-other }()
	if _, err := s.ReadMarks(ctx, []string{"t"}); err != nil { // the budget has seen a reply
		t.Fatal(err)
	}
	p.SetSlowCommand("evalsha", 90*time.Millisecond)
	var got Claimed
	s.ClaimMany(ctx, []rediskey.Names{rediskey.For(ns, "k")}, func(_ int, c Claimed) { got = c })
	if got.Err != nil || !got.Won {
		t.Fatalf("a claim slowed past its budget while Redis answered others: %+v; want it won", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.failedErrs) != 0 {
		t.Errorf("Failed was told %v for a claim that won", r.failedErrs)
	}
}
