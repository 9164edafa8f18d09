// Package redistest is the test helper for packages that need Redis: one real
// redis-server per test package, started on a free loopback port by [Main],
// with clients and key prefixes per test.
//
// A test that needs Redis and finds no redis-server binary is skipped, except
// under CI=true, where it fails.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redisserver"
)

var (
	server   *redisserver.Server
	startErr error
	seq      atomic.Int64

	clusterOnce sync.Once
	cluster     *redisserver.Cluster
	clusterErr  error
)

// Main starts the package's redis-server, runs the tests, checks that no
// goroutine leaked, stops the server and exits.
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	server, startErr = redisserver.Start(redisserver.Options{})
	code := m.Run()
	if cluster != nil {
		if err := cluster.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "redistest:", err)
		}
	}
	if server != nil {
		if err := server.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "redistest:", err)
		}
	}
	os.Exit(leakcheck.Check(code))
}

// Missing skips the test for want it could not start, or fails it under
// CI=true, where everything the tests need must be there.
func Missing(t testing.TB, want string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true: %v", want, err)
	}
	t.Skipf("no %s: %v", want, err)
}

// Server returns the package's running server. Without one it skips the test,
// or fails it under CI=true.
func Server(t testing.TB) *redisserver.Server {
	t.Helper()
	if server == nil {
		err := startErr
		if err == nil {
			err = fmt.Errorf("redistest: redistest.Main was not called from TestMain")
		}
		Missing(t, "redis-server", err)
	}
	return server
}

// Cluster returns the package's Redis Cluster (3 masters on loopback),
// started on first use and stopped by [Main]. Without redis-server or
// redis-cli it skips the test, or fails it under CI=true.
func Cluster(t testing.TB) *redisserver.Cluster {
	t.Helper()
	clusterOnce.Do(func() { cluster, clusterErr = redisserver.StartCluster(3, 0) })
	if clusterErr != nil {
		Missing(t, "a Redis Cluster", clusterErr)
	}
	return cluster
}

// ClusterClient returns a new cluster client of its own, closed when the
// test ends.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	return ClusterClientFor(t, Cluster(t))
}

// Addr returns the package server's address (see [Server]).
func Addr(t testing.TB) string { return Server(t).Addr() }

// Getenv is an environment for programs that choose their Redis the way
// the examples and the bench do: REDIS_URL points at the package's server,
// and nothing else is set.
func Getenv(t testing.TB) func(string) string {
	t.Helper()
	url := Server(t).URL()
	return func(k string) string {
		if k == "REDIS_URL" {
			return url
		}
		return ""
	}
}

// Client returns a new client of its own for the package's server, closed
// when the test ends. Separate clients simulate separate replicas.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	return ClientOpts(t, &redis.Options{})
}

// ClientOpts is [Client] with options; Addr is filled in.
func ClientOpts(t testing.TB, opts *redis.Options) *redis.Client {
	t.Helper()
	o := *opts
	o.Addr = Addr(t)
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: ping %s: %v", o.Addr, err)
	}
	return c
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Prefix returns a key prefix unique to this test in this process, so tests
// sharing the server never see each other's keys.
func Prefix(t testing.TB) string {
	name := unsafe.ReplaceAllString(t.Name(), "_")
	return fmt.Sprintf("t%d-%s", seq.Add(1), strings.ToLower(name))
}

// NewCluster starts a Redis Cluster of the test's own (masters, each with
// replicas), for tests that kill or reshard nodes; it stops when the test
// ends. Without redis-server or redis-cli it skips the test, or fails it
// under CI=true.
func NewCluster(t testing.TB, masters, replicas int) *redisserver.Cluster {
	t.Helper()
	c, err := redisserver.StartCluster(masters, replicas)
	if err != nil {
		Missing(t, "a Redis Cluster", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ClusterClientFor returns a new client of its own for cluster c, closed
// when the test ends.
func ClusterClientFor(t testing.TB, c *redisserver.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatalf("redistest: cluster ping: %v", err)
	}
	return cc
}

// ShardSubscribers returns PUBSUB SHARDNUMSUB channel on the node at addr:
// how many connections there hold a sharded subscription to channel.
func ShardSubscribers(t testing.TB, addr, channel string) int64 {
	t.Helper()
	return numsub(t, addr, "SHARDNUMSUB", channel)
}

// PlainSubscribers returns PUBSUB NUMSUB channel on the node at addr.
func PlainSubscribers(t testing.TB, addr, channel string) int64 {
	t.Helper()
	return numsub(t, addr, "NUMSUB", channel)
}

func numsub(t testing.TB, addr, sub, channel string) int64 {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Do(ctx, "PUBSUB", sub, channel).Slice()
	if err != nil || len(res) != 2 {
		t.Fatalf("redistest: PUBSUB %s %s on %s: %v %v", sub, channel, addr, res, err)
	}
	n, _ := res[1].(int64)
	return n
}

// MoveSlot moves a hash slot, with its keys, to the master at dst, the way
// redis-cli --cluster reshard does: IMPORTING/MIGRATING, MIGRATE the keys,
// then SETSLOT NODE on every master. The old owner then unsubscribes the
// slot's sharded subscribers (Redis 7).
func MoveSlot(t testing.TB, cc *redis.ClusterClient, slot int, dst string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, masters, err := SlotOwner(ctx, cc, slot)
	if err != nil {
		t.Fatalf("redistest: CLUSTER SHARDS: %v", err)
	}
	if src == "" || src == dst {
		t.Fatalf("redistest: slot %d is on %q, cannot move it to %s", slot, src, dst)
	}
	clients := map[string]*redis.Client{}
	node := func(addr string) *redis.Client {
		if c := clients[addr]; c != nil {
			return c
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		clients[addr] = c
		return c
	}
	from, to := node(src), node(dst)
	fromID, err1 := from.ClusterMyID(ctx).Result()
	toID, err2 := to.ClusterMyID(ctx).Result()
	if err := errors.Join(err1, err2,
		to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(),
		from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err()); err != nil {
		t.Fatalf("redistest: move slot %d: %v", slot, err)
	}
	host, port, _ := net.SplitHostPort(dst)
	for {
		keys, err := from.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			t.Fatalf("redistest: GETKEYSINSLOT %d: %v", slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := from.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: MIGRATE: %v", err)
		}
	}
	// The new owner first, then the old one, then the rest.
	order := []string{dst, src}
	for _, a := range masters {
		if !slices.Contains(order, a) {
			order = append(order, a)
		}
	}
	for _, addr := range order {
		if err := node(addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
			t.Fatalf("redistest: SETSLOT %d NODE on %s: %v", slot, addr, err)
		}
	}
}

// NewSentinel starts a Sentinel deployment of the test's own (master,
// replica, three Sentinels), stopped when the test ends. Without
// redis-server it skips the test, or fails it under CI=true.
func NewSentinel(t testing.TB) *redisserver.Sentinel {
	t.Helper()
	s, err := redisserver.StartSentinel()
	if err != nil {
		Missing(t, "a Sentinel deployment", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// FailoverClient returns a new Sentinel-backed client of its own for s,
// closed when the test ends.
func FailoverClient(t testing.TB, s *redisserver.Sentinel) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redisserver.SentinelMaster, SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: ping through the sentinels: %v", err)
	}
	return c
}

// SlotOwner asks c (a node, or any node of a cluster client) which healthy
// master owns slot, and which healthy masters there are.
func SlotOwner(ctx context.Context, c redis.Cmdable, slot int) (owner string, masters []string, err error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return "", nil, err
	}
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" || n.Health != "online" {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			masters = append(masters, addr)
			for _, r := range sh.Slots {
				if r.Start <= int64(slot) && int64(slot) <= r.End {
					owner = addr
				}
			}
		}
	}
	return owner, masters, nil
}

// Independent starts n redis-servers of the test's own that know nothing of
// each other (the independent masters of a Redlock quorum), stopped when the
// test ends, and returns them with a new client for each, in the same order.
// Without redis-server it skips the test, or fails it under CI=true.
func Independent(t testing.TB, n int) ([]*redisserver.Server, []*redis.Client) {
	t.Helper()
	servers, err := redisserver.StartIndependent(n, redisserver.Options{})
	if err != nil {
		Missing(t, fmt.Sprintf("%d redis-servers", n), err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Close()
		}
	})
	clients := make([]*redis.Client, n)
	for i, s := range servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	return servers, clients
}

// RefusingAddr returns a loopback address where nothing listens: a client
// pointed at it has its connections refused (Redis down, not silent). The
// port stays reserved until the test ends, so that no listener started
// later in the process is handed it.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	addr, release, err := reserveRefusingPort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return addr
}
