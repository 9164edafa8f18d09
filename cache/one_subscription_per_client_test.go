package cache_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Every cache on one go-redis client shares one pub/sub connection and one
// heartbeat (issue 38): with N busy caches on a client, Redis holds one
// pub/sub connection for them, and the heartbeat PINGs over a window do
// not grow with N. Before, each cache had its own subscription and its own
// heartbeat: N connections and 4N/δ PINGs a second.
//
// The window is a measurement of a rate on Redis' own counters, on a
// redis-server of the test's own; only an upper bound is asserted, which a
// loaded machine (heartbeats late) cannot break.
func TestCachesOnOneClientShareOneSubscriptionAndHeartbeat(t *testing.T) {
	const wait = 200 * time.Millisecond
	// One heartbeat sends 4/δ PINGs a second (heartbeatsPerWait); allow
	// half as much again, and the idle probe's one every 2 s.
	maxPings := 1.5*4/wait.Seconds() + 1
	for _, n := range []int{1, 4} {
		t.Run(strconv.Itoa(n)+" caches", func(t *testing.T) {
			servers, infos := redistest.Independent(t, 1)
			info := infos[0]
			rdb := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			ctx := context.Background()
			caches := make([]*cache.Cache[string], n)
			for i := range caches {
				caches[i] = newCache[string](t, rdb, cache.Options{Namespace: "share-" + strconv.Itoa(i), InvalidationWait: wait})
			}
			origin := func(context.Context) (string, error) { return "v", nil }
			for _, c := range caches {
				if _, err := c.Fetch(ctx, "k", origin); err != nil {
					t.Fatal(err)
				}
			}
			pollFor(t, "every cache's subscription and heartbeat", 10*time.Second, 5*time.Millisecond, func() bool {
				for _, c := range caches {
					if !cache.Heartbeating(c) {
						return false
					}
				}
				return pubsubConns(t, info) >= 1
			})

			// Every cache busy for the window: a hit every δ/8 keeps its
			// heartbeat wanted.
			const window = 2 * time.Second
			before := commandCalls(t, info, "ping")
			start := time.Now()
			var wg sync.WaitGroup
			for _, c := range caches {
				wg.Go(func() {
					for time.Since(start) < window {
						if _, err := c.Fetch(ctx, "k", origin); err != nil {
							t.Error(err)
							return
						}
						time.Sleep(wait / 8) // the traffic's pace
					}
				})
			}
			wg.Wait()
			pings := float64(commandCalls(t, info, "ping")-before) / time.Since(start).Seconds()
			conns := pubsubConns(t, info)
			t.Logf("FIGURE %d busy caches on one client, δ=%s: %d pub/sub connection(s), %.1f PINGs/s", n, wait, conns, pings)
			if conns != 1 {
				t.Errorf("%d pub/sub connections for %d caches on one client, want 1", conns, n)
			}
			if pings > maxPings {
				t.Errorf("%.1f PINGs/s from %d busy caches on one client, want at most %.1f (one heartbeat at 4/δ)", pings, n, maxPings)
			}
		})
	}
}

// Closing one of two caches on a client (the same namespace: they share
// the invalidation channel too) disturbs nothing of the other: its L1
// still hears another replica's writes, and the heartbeat still vouches
// for its marks, so that its hits read no mark.
func TestClosingOneCacheOnAClientLeavesTheOtherListening(t *testing.T) {
	ctx := bounded(t, 30*time.Second)
	const wait = 100 * time.Millisecond
	opts := cache.Options{Namespace: redistest.Prefix(t), InvalidationWait: wait, L1Size: 100, L1TTL: time.Minute, TTL: time.Hour}
	rdb := redistest.Client(t)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	a := newCache[string](t, rdb, opts)
	b := newCache[string](t, rdb, opts)
	other := newCache[string](t, redistest.Client(t), opts)
	l1Synced(t, a)
	l1Synced(t, b)
	l1Synced(t, other)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	if err := other.Set(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		hits := b.Stats().L1Hits
		v, ok, err := b.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return ok && v == "v1" && b.Stats().L1Hits > hits
	}, func() string { return fmt.Sprintf("b's L1 never served v1: %+v", b.Stats()) })
	if err := other.Set(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	// L1TTL is a minute: only the invalidation takes v1 out of b's L1.
	eventually(t, 5*time.Second, func() bool {
		v, _, err := b.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return v == "v2"
	}, func() string {
		return "b's L1 kept v1 after another replica's Set: its invalidations stopped with a's Close"
	})

	// Hits every δ/2 for 6 δ: with the heartbeat vouching for b's marks
	// none reads them, but for a heartbeat answered late on a loaded
	// machine (see TestHeartbeatStopsWhenIdleAndRestartsOnDemand).
	pollFor(t, "b's heartbeat to run", 10*time.Second, time.Millisecond, func() bool {
		if _, err := b.Fetch(ctx, "h", func(context.Context) (string, error) { return "x", nil }); err != nil {
			t.Fatal(err)
		}
		return cache.Heartbeating(b)
	})
	before := rt.marks.Load()
	for range 12 {
		time.Sleep(wait / 2) // the traffic's pace, not a wait for an event
		r, err := b.Fetch(ctx, "h", func(context.Context) (string, error) { return "x", nil })
		if err != nil || r.Value != "x" {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if n := rt.marks.Load() - before; n > 2 {
		t.Errorf("%d marks reads in 12 hits over %s after the other cache on the client closed, want at most 2", n, 6*wait)
	}
}

// On a Cluster the caches of one ClusterClient share its sharded pub/sub
// connections (one per master) and its plain one: two caches waiting on
// keys of one master hold one sharded connection there, not two.
func TestCachesOnOneClusterClientShareTheShardedConnections(t *testing.T) {
	cl := redistest.Cluster(t)
	name := "share-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ClientName: name})
	t.Cleanup(func() { _ = cc.Close() })
	ctx := bounded(t, 30*time.Second)
	prefix := redistest.Prefix(t)
	// L1 on: the invalidation subscription is the plain connection.
	opts := func(ns string) cache.Options {
		return cache.Options{Namespace: ns, L1Size: 100, WaitTimeout: 20 * time.Second, ComputeTimeout: 20 * time.Second}
	}
	nsB, nsC := prefix+"-b", prefix+"-c"
	b := newCacheAsConfigured[string](t, cc, opts(nsB))
	c := newCacheAsConfigured[string](t, cc, opts(nsC))
	// Another replica computes one key of each namespace, on one master,
	// while b and c wait for it.
	holder := redistest.ClusterClient(t)
	hb := newCacheAsConfigured[string](t, holder, opts(nsB))
	hc := newCacheAsConfigured[string](t, holder, opts(nsC))
	keyB := "k"
	master := masterOf(t, cc, "{"+nsB+":"+keyB+"}:n")
	keyC := ""
	for i := range 1000 {
		k := "k" + strconv.Itoa(i)
		if masterOf(t, cc, "{"+nsC+":"+k+"}:n") == master {
			keyC = k
			break
		}
	}
	if keyC == "" {
		t.Fatal("no key of the second namespace on the first key's master")
	}
	release := make(chan struct{})
	slow := func(context.Context) (string, error) { <-release; return "v", nil }
	var wg sync.WaitGroup
	for _, h := range []struct {
		c   *cache.Cache[string]
		key string
	}{{hb, keyB}, {hc, keyC}} {
		wg.Go(func() {
			if _, err := h.c.Fetch(ctx, h.key, slow); err != nil {
				t.Error(err)
			}
		})
	}
	pollFor(t, "the holders' leases", 10*time.Second, time.Millisecond, func() bool {
		for _, lease := range []string{"{" + nsB + ":" + keyB + "}:l", "{" + nsC + ":" + keyC + "}:l"} {
			if n, err := cc.Exists(ctx, lease).Result(); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	for _, w := range []struct {
		c   *cache.Cache[string]
		key string
	}{{b, keyB}, {c, keyC}} {
		wg.Go(func() {
			r, err := w.c.Fetch(ctx, w.key, func(context.Context) (string, error) {
				return "", fmt.Errorf("computed while another replica held the lease")
			})
			if err != nil || r.Value != "v" {
				t.Errorf("%s: %+v %v", w.key, r, err)
			}
		})
	}
	pollFor(t, "both waiters' sharded subscriptions", 10*time.Second, time.Millisecond, func() bool {
		return redistest.ShardSubscribers(t, master, "{"+nsB+":"+keyB+"}:n") == 1 && redistest.ShardSubscribers(t, master, "{"+nsC+":"+keyC+"}:n") == 1
	})
	sharded, plain := 0, 0
	for _, addr := range cl.Addrs() {
		n := namedPubsubConns(t, addr, name)
		if addr == master {
			sharded = n
		}
		plain += n
	}
	plain -= sharded
	close(release)
	wg.Wait()
	t.Logf("2 caches on one ClusterClient, waiting on one master: %d sharded pub/sub connection(s) there, %d elsewhere", sharded, plain)
	// On the master: its sharded connection, and the plain one if the
	// client put it there.
	if sharded+plain > 2 {
		t.Errorf("%d pub/sub connections (%d on the waiters' master) for 2 caches on one ClusterClient, want one sharded one and one plain one", sharded+plain, sharded)
	}
}

// masterOf is the address of the master that owns key's slot.
func masterOf(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	node, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr
}

// pubsubConns counts the pub/sub connections Redis holds (CLIENT LIST TYPE
// pubsub).
func pubsubConns(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	s, err := rdb.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// namedPubsubConns counts the pub/sub connections the node at addr holds
// for clients named name.
func namedPubsubConns(t *testing.T, addr, name string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s, err := c.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(s) {
		if strings.Contains(line, " name="+name+" ") {
			n++
		}
	}
	return n
}
