package cache_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
)

// unsubscribedClient is a client whose first connection, the invalidation
// subscription's (New dials it before any command), goes through sub, and
// every other through p: with sub partitioned, no heartbeat's answer
// vouches for the marks, which a cache on the client then trusts by its
// reads alone, as on a Cluster; those reads go through p. opts builds the
// client's options for an address (clientConfigs).
func unsubscribedClient(t testing.TB, opts func(addr string) *redis.Options, p, sub *faultproxy.Proxy) *redis.Client {
	t.Helper()
	o := opts(p.Addr())
	var dials atomic.Int32
	var d net.Dialer
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return d.DialContext(ctx, network, sub.Addr())
		}
		return d.DialContext(ctx, network, addr)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
