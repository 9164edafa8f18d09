package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// Using releases the lease within a bound of its own (the TTL, at most
// 5 s), shorter here than the 3 s RedisTimeout: a Redis that goes silent
// as fn returns makes Using fail with an error that says Redis did not
// answer (ErrUnavailable, ErrRedisTimeout) and names the server, not with
// a context error that its caller never set. The robustness suite's lock
// workload met it as an undocumented "context deadline exceeded".
func TestUsingReleaseThatDoesNotAnswerIsUnavailable(t *testing.T) {
	addrs, _, _ := serverAddrs(t, 1)
	proxies, proxied := newProxies(t, addrs)
	c := newClient(t, replicaClients(t, proxied)[0], lease.Options{RedisTimeout: 3 * time.Second})
	start := time.Now()
	err := c.Using(context.Background(), redistest.Prefix(t), time.Second, func(context.Context, *lease.Lease) error {
		proxies[0].SetPartition(true)
		return nil
	})
	took := time.Since(start)
	if !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, lease.ErrRedisTimeout) || !strings.Contains(err.Error(), proxied[0]) {
		t.Errorf("Using: %v; want ErrUnavailable and ErrRedisTimeout naming %s", err, proxied[0])
	}
	if took > 2*time.Second {
		t.Errorf("Using returned after %s: the release outlived its 1 s bound", took.Round(time.Millisecond))
	}
}
