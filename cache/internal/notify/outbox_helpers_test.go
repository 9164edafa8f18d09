package notify

// Helpers of the outbox tests (outbox_*_test.go): hash-tagged channels,
// killing pub/sub connections, a Cluster client behind a fault proxy, and a
// notifier's channel states in words.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// describeStates renders the notifier's channel states, for a failure.
func describeStates(n *Notifier) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := ""
	for ch, st := range n.chans {
		last := "nil"
		switch {
		case st.lastSub == resubscribed:
			last = "resubscribed"
		case st.lastSub != nil:
			last = fmt.Sprintf("settled=%v err=%v", st.lastSub.settled(), st.lastSub.err)
		}
		pend := fmt.Sprintf("%d unsubscribes", st.unsubs)
		conn := "nil"
		if st.conn != nil {
			conn = fmt.Sprintf("%q dead=%v outbox=%d sending=%v", st.conn.addr, st.conn.dead, len(st.conn.outbox), st.conn.sending)
		}
		out += fmt.Sprintf("%s: waiters=%d lastSub=%s pending=%s conn=%s; ", ch, len(st.waiters), last, pend, conn)
	}
	return out
}

// hashTagged returns n channels in the form the cache uses ({tag}:n), with
// distinct hash tags, so that on a Cluster they spread over the masters.
func hashTagged(t *testing.T, n int) []string {
	prefix := redistest.Prefix(t)
	out := make([]string, n)
	for i := range out {
		out[i] = "{" + prefix + ":" + strconv.Itoa(i) + "}:n"
	}
	return out
}

// killPubSub runs CLIENT KILL TYPE pubsub on every address.
func killPubSub(addrs ...string) func() {
	return func() {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
			cancel()
			_ = c.Close()
		}
	}
}

// slotOwner returns the master that owns channel's slot now.
func slotOwner(t *testing.T, cc *redis.ClusterClient, channel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slot, err := cc.ClusterKeySlot(ctx, channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	owner, _, err := redistest.SlotOwner(ctx, cc, int(slot))
	if err != nil || owner == "" {
		t.Fatalf("owner of slot %d: %q %v", slot, owner, err)
	}
	return owner
}

// viaProxyFor returns a cluster client for cl whose connections to the
// node at addr go through a new faultproxy; the others go direct.
func viaProxyFor(t *testing.T, cl *redisserver.Cluster, addr string, opts redis.ClusterOptions) (*redis.ClusterClient, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var d net.Dialer
	opts.Addrs = cl.Addrs()
	opts.Dialer = func(ctx context.Context, network, a string) (net.Conn, error) {
		if a == addr {
			a = p.Addr()
		}
		return d.DialContext(ctx, network, a)
	}
	cc := redis.NewClusterClient(&opts)
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	return cc, p
}
