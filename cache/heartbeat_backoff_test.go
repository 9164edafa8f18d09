package cache_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// While Redis refuses connections, an idle cache on a plain client backs
// off its heartbeat as the receiver does, rather than dial at the
// heartbeat's rate (every InvalidationWait/4: each failed heartbeat PING
// dials, go-redis' PubSub.conn, and resets the notifier). The window is a
// measurement of a rate, not a wait for an event.
func TestHeartbeatBacksOffWhileRedisRefuses(t *testing.T) {
	var dials atomic.Int32
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("connection refused")
	}})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := cache.New[string](rdb, cache.Options{Namespace: "heartbeat-dials"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	before := dials.Load()
	time.Sleep(time.Second)
	n := dials.Load() - before
	_ = c.Close()
	t.Logf("dials in 1s of an idle cache while Redis refuses: %d", n)
	if n > 10 {
		t.Fatalf("%d dials/s from an idle cache while Redis is down", n)
	}
}
