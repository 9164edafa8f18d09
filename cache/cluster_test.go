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

// The cache runs unchanged on a real 3-master Redis Cluster: every script
// touches one slot ({ns:k}), and fills reach waiters on other nodes.
func TestClusterStampedeOneCompute(t *testing.T) {
	t.Parallel()
	ns := redistest.Prefix(t)
	var caches []*cache.Cache[string]
	for range 4 {
		caches = append(caches, newCache[string](t, redistest.ClusterClient(t), cache.Options{Namespace: ns}))
	}
	// Keys spread over the slots, so every node takes part.
	for i := range 6 {
		key := fmt.Sprint("hot-", i)
		o := &origin[string]{value: "v-" + key, delay: 50 * time.Millisecond}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, c := range caches {
			for range 50 {
				wg.Go(func() {
					<-start
					if v, err := c.GetOrCompute(context.Background(), key, o.fn); err != nil || v != "v-"+key {
						t.Errorf("%s: %q %v", key, v, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if n := o.calls.Load(); n != 1 {
			t.Fatalf("%s: origin ran %d times on the cluster", key, n)
		}
	}
}

func TestClusterSetDeleteBatchAndL1(t *testing.T) {
	ns := redistest.Prefix(t)
	a := newCache[string](t, redistest.ClusterClient(t), cache.Options{Namespace: ns, L1Size: 100})
	b := newCache[string](t, redistest.ClusterClient(t), cache.Options{Namespace: ns, L1Size: 100})
	ctx := context.Background()
	if err := a.Set(ctx, "k", "one"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's L1", func() bool {
		v, _, _ := b.Get(ctx, "k")
		return v == "one" && b.Stats().L1Entries == 1
	})
	if err := a.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the invalidation across the cluster", func() bool { return b.Stats().L1Entries == 0 })
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprint("batch-", i)
	}
	o := &batchOrigin{}
	got, err := a.GetOrComputeMany(ctx, keys, o.fn)
	if err != nil || len(got) != len(keys) || len(o.calls) != 1 {
		t.Fatalf("%d values, %v, %d calls", len(got), err, len(o.calls))
	}
	got, err = b.GetOrComputeMany(ctx, keys, o.fn)
	if err != nil || len(got) != len(keys) || len(o.calls) != 1 {
		t.Fatalf("second batch: %d values, %v, %d calls", len(got), err, len(o.calls))
	}
}

// heldStorm is one hot key: a holder whose compute is held,
// and waiters on other caches (separate clients: separate processes).
type heldStorm struct {
	channel string // the key's fill channel, {ns:key}:n
	o       *origin[string]
	wg      sync.WaitGroup
	errs    atomic.Int32
}

// startHeldStorm starts the holder on caches[0], waits until it
// computes, then starts perCache waiters on each other cache.
func startHeldStorm(t *testing.T, caches []*cache.Cache[string], ns, key string, perCache int) *heldStorm {
	s := &heldStorm{channel: "{" + ns + ":" + key + "}:n",
		o: &origin[string]{value: "v-" + key, started: make(chan struct{}, 1), release: make(chan struct{})}}
	call := func(c *cache.Cache[string]) {
		defer s.wg.Done()
		if v, err := c.GetOrCompute(context.Background(), key, s.o.fn); err != nil || v != s.o.value {
			s.errs.Add(1)
			t.Errorf("%s: %q %v", key, v, err)
		}
	}
	s.wg.Add(1)
	go call(caches[0])
	<-s.o.started
	for _, c := range caches[1:] {
		for range perCache {
			s.wg.Add(1)
			go call(c)
		}
	}
	return s
}

// finish releases the holder and waits for every caller.
func (s *heldStorm) finish() {
	close(s.o.release)
	s.wg.Wait()
}

// await polls cond, which reads state Redis changes (a failover takes
// seconds: a longer deadline than waitFor's, and gentler polling).
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	pollFor(t, what, 30*time.Second, 10*time.Millisecond, cond)
}

// On a cluster, waiters subscribe with SSUBSCRIBE on the master that owns
// the key's slot (one sharded subscription per process, none plain), and
// the fill's SPUBLISH reaches them.
func TestClusterShardedPubSub(t *testing.T) {
	ns := redistest.Prefix(t)
	caches := replicasOn[string](t, 4, func(t testing.TB) redis.UniversalClient { return redistest.ClusterClient(t) },
		cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute})
	s := startHeldStorm(t, caches, ns, "k", 50)
	addr := ownerFrom(t, redistest.Cluster(t), s.channel)
	await(t, "3 sharded subscribers", func() bool { return redistest.ShardSubscribers(t, addr, s.channel) == 3 })
	for _, a := range redistest.Cluster(t).Addrs() {
		if n := redistest.PlainSubscribers(t, a, s.channel); n != 0 {
			t.Errorf("%s: %d plain subscribers on %s", a, n, s.channel)
		}
	}
	s.finish()
	if n := s.o.calls.Load(); n != 1 || s.errs.Load() != 0 {
		t.Fatalf("origin ran %d times, %d errors", n, s.errs.Load())
	}
	// With polling every minute, only the notification can have woken them.
	if n := total(caches[1:], waited); n != 150 {
		t.Fatalf("%d of 150 waiters were woken by the fill", n)
	}
	await(t, "the subscriptions gone", func() bool { return redistest.ShardSubscribers(t, addr, s.channel) == 0 })
}

// Resharding moves the key's slot to another master while the waiters
// wait: Redis unsubscribes them there, they subscribe again on the new
// owner, and the fill (published there) reaches them.
func TestClusterReshardResubscribes(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t, 3, 0)
	ns := redistest.Prefix(t)
	newClient := func(t testing.TB) redis.UniversalClient { return redistest.ClusterClientFor(t, cl) }
	caches := replicasOn[string](t, 4, newClient, cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute})
	cc := redistest.ClusterClientFor(t, cl)
	s := startHeldStorm(t, caches, ns, "k", 50)
	from := ownerFrom(t, cl, s.channel)
	await(t, "3 sharded subscribers", func() bool { return redistest.ShardSubscribers(t, from, s.channel) == 3 })
	to := cl.Addrs()[0]
	if to == from {
		to = cl.Addrs()[1]
	}
	slot, err := cc.ClusterKeySlot(context.Background(), s.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	redistest.MoveSlot(t, cc, int(slot), to)
	await(t, "the waiters subscribed on the new owner", func() bool { return redistest.ShardSubscribers(t, to, s.channel) == 3 })
	if n := redistest.ShardSubscribers(t, from, s.channel); n != 0 {
		t.Fatalf("%d subscribers left on the old owner", n)
	}
	s.finish()
	if n := s.o.calls.Load(); n != 1 || s.errs.Load() != 0 {
		t.Fatalf("origin ran %d times, %d errors", n, s.errs.Load())
	}
	if n := total(caches[1:], waited); n != 150 {
		t.Fatalf("%d of 150 waiters were woken by the fill", n)
	}
}

// The master that owns the key dies while the waiters wait: its replica is
// promoted, the waiters subscribe again there, and the holder's fill lands
// on it. No caller sees an error and the origin runs once.
func TestClusterFailoverResubscribes(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t, 3, 1)
	ns := redistest.Prefix(t)
	newClient := func(t testing.TB) redis.UniversalClient { return redistest.ClusterClientFor(t, cl) }
	caches := replicasOn[string](t, 4, newClient, cache.Options{Namespace: ns, WaitTimeout: time.Minute, LeaseTTL: 30 * time.Second})
	s := startHeldStorm(t, caches, ns, "k", 50)
	from := ownerFrom(t, cl, s.channel)
	await(t, "3 sharded subscribers", func() bool { return redistest.ShardSubscribers(t, from, s.channel) == 3 })
	var dead *redisserver.Server
	for _, n := range cl.Nodes {
		if n.Addr() == from {
			dead = n
		}
	}
	// Replication is asynchronous (and, just after a diskless sync, starts
	// streaming only at the replica's first ACK): kill the master once its
	// replica has the lease, the common case. A lease lost with the master
	// is TestLostLeaseFencesOutTheOldHolder's case. While the holder
	// computes, the key's only Redis key is its lease.
	await(t, "the lease on the replica", func() bool { return replicaKeys(t, cl, from) >= 1 })
	if err := dead.Stop(); err != nil {
		t.Fatal(err)
	}
	var to string
	await(t, "a replica promoted", func() bool {
		to = ownerFrom(t, cl, s.channel)
		return to != "" && to != from
	})
	await(t, "the waiters subscribed on the promoted master", func() bool {
		return redistest.ShardSubscribers(t, to, s.channel) == 3
	})
	s.finish()
	if n := s.o.calls.Load(); n != 1 || s.errs.Load() != 0 {
		t.Fatalf("origin ran %d times, %d errors", n, s.errs.Load())
	}
	t.Logf("cluster failover: origin calls %d, caller errors 0, refills %d", s.o.calls.Load(), total(caches, refills))
}

// ownerFrom asks a live node which master owns key's slot now.
func ownerFrom(t *testing.T, cl *redisserver.Cluster, key string) string {
	t.Helper()
	for _, n := range cl.Nodes {
		if !n.Running() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			continue
		}
		if owner, _, err := redistest.SlotOwner(ctx, c, int(slot)); err == nil && owner != "" {
			return owner
		}
	}
	return ""
}

// replicaKeys returns DBSIZE on the replica of the master at addr.
func replicaKeys(t *testing.T, cl *redisserver.Cluster, master string) int64 {
	t.Helper()
	ctx := context.Background()
	for _, n := range cl.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr()})
		role, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) >= 3 && role[0] == "slave" && fmt.Sprint(role[1], ":", role[2]) == master {
			size, _ := c.DBSize(ctx).Result()
			_ = c.Close()
			return size
		}
		_ = c.Close()
	}
	t.Fatalf("no replica of %s", master)
	return 0
}
