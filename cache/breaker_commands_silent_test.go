package cache_test

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// The breaker opens when the commands get no answer, even while the
// invalidation subscription's heartbeat is still answered: its connection
// may live on a path the commands' connections do not share (a partition
// of some sockets, a middlebox that black-holes the pool's connections).
// A PONG on the subscription shows that Redis lives, not that a step can
// reach it: calls still cost one budget each, answer degraded, and the
// breaker opens after BreakerThreshold of them.
func TestBreakerOpensWhenOnlyTheHeartbeatIsAnswered(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) { breakerOpensWhenOnlyTheHeartbeatIsAnswered(t, cfg.opts) })
	}
}

func breakerOpensWhenOnlyTheHeartbeatIsAnswered(t *testing.T, opts func(addr string) *redis.Options) {
	sub, cmds := newProxy(t), newProxy(t)
	var subDials atomic.Int32
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		addr := cmds.Addr()
		if fromPubSub() {
			subDials.Add(1)
			addr = sub.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	o := opts(cmds.Addr())
	o.Dialer = dial
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	// L1 on: the replica's callers keep hitting "warm" in L1, which asks
	// the heartbeat for its trust and so keeps it running (it runs only
	// while decisions want it), without a step of their own.
	c := newCache[string](t, rdb, cache.Options{RedisTimeout: shortBudget, InvalidationWait: 100 * time.Millisecond, WaitTimeout: 5 * time.Second, L1Size: 16})
	origin := func(context.Context) (string, error) { return "v", nil }
	if _, err := c.Fetch(t.Context(), "warm", origin); err != nil {
		t.Fatal(err)
	}
	// The heartbeat is answered on its own path: a slower one raises the
	// budget, which only the heartbeat can have taught.
	sub.SetLatency(60 * time.Millisecond)
	pollFor(t, "the heartbeat to be answered on the subscription's path", 10*time.Second, 10*time.Millisecond, func() bool {
		if _, err := c.Fetch(t.Context(), "warm", origin); err != nil {
			t.Fatal(err)
		}
		return subDials.Load() > 0 && cache.RedisBudget(c) >= 150*time.Millisecond
	})
	sub.SetLatency(0)
	cmds.SetPartition(true)
	const perCall = 2 * time.Second // the learnt budget is well under 1 s; WaitTimeout is 5 s
	opened := -1
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		start := time.Now()
		r, err := c.Fetch(ctx, "silent"+strconv.Itoa(i), origin)
		took := time.Since(start)
		cancel()
		if took > perCall {
			t.Errorf("call %d took %s against commands black-holed", i, took)
		}
		if err != nil || r.Outcome != cache.Degraded {
			t.Errorf("call %d: %+v %v, want degraded", i, r, err)
		}
		if opened < 0 && c.Stats().BreakerOpen {
			opened = i
		}
		if t.Failed() {
			break
		}
	}
	if opened < 0 || opened >= 5 {
		t.Errorf("breaker opened at call %d, want by call 4 (BreakerThreshold 5)", opened)
	}
}

// fromPubSub reports whether the dial in progress is for go-redis'
// pub/sub connection.
func fromPubSub() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "PubSub") {
			return true
		}
		if !more {
			return false
		}
	}
}
