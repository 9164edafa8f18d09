package cache_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A write reaches the replicas whose L1 holds its key, not the whole fleet
// (issue 38): in fleets of 8 and of 64 replicas (each its own go-redis
// client and cache, L1 on, every one subscribed), one of them holding the
// key in L1, a Set from another is published once, to one subscriber, and
// costs Redis about as many bytes in both fleets, under 2 KB (before, every
// write was also announced on the namespace channel to every replica:
// this test measured 626 bytes per Set among 8 replicas and 4,874 among 64
// on the commit before, 79 and 79 after). The holder still drops the value
// the Set replaced.
//
// The bytes are Redis' own counter (INFO stats, on a redis-server of the
// test's own), over the Sets alone; δ is 1 s so that the heartbeats of 64
// replicas add little to it.
func TestAWriteReachesOnlyTheReplicasHoldingItsKey(t *testing.T) {
	t.Parallel()
	small := writeFanout(t, 8)
	large := writeFanout(t, 64)
	t.Logf("FIGURE 8 replicas: %s", small)
	t.Logf("FIGURE 64 replicas: %s", large)
	for _, f := range []fanout{small, large} {
		if f.publishes != 1 || f.receivers != 1 {
			t.Errorf("%d replicas: a Set published %.2f times to %d subscribers of its key's channel, want once to its one holder", f.replicas, f.publishes, f.receivers)
		}
		if f.bytes > 2048 {
			t.Errorf("%d replicas: Redis sent %.0f bytes per Set, want at most 2 KB", f.replicas, f.bytes)
		}
	}
	if large.bytes > small.bytes+512 {
		t.Errorf("a Set cost Redis %.0f bytes among 64 replicas against %.0f among 8: it grows with the fleet", large.bytes, small.bytes)
	}
}

// fanout is what the Sets of writeFanout cost Redis.
type fanout struct {
	replicas  int
	bytes     float64 // bytes Redis sent per Set, the Set's reply included
	publishes float64 // PUBLISH calls per Set
	receivers int64   // subscribers of the key's channel
}

func (f fanout) String() string {
	return fmt.Sprintf("%.0f bytes sent per Set, %.2f PUBLISH per Set, %d subscribers of the key's channel", f.bytes, f.publishes, f.receivers)
}

// writeFanout builds r replicas on a redis-server of the test's own, makes
// one call on each, reads "held" on replica 0 until L1 answers it, then
// Sets it 20 times from replica r-1 and measures them; replica 0 must then
// serve the last value.
func writeFanout(t *testing.T, r int) fanout {
	t.Helper()
	const sets = 20
	servers, clients := redistest.Independent(t, 1)
	addr, info := servers[0].Addr(), clients[0]
	ctx := bounded(t, 60*time.Second)
	fleet := make([]*cache.Cache[string], r)
	for i := range fleet {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
		t.Cleanup(func() { _ = rdb.Close() })
		fleet[i] = newCacheAsConfigured[string](t, rdb, cache.Options{Namespace: "fanout", InvalidationWait: time.Second, TTL: time.Hour})
	}
	origin := func(context.Context) (string, error) { return "v", nil }
	for _, c := range fleet[1:] {
		if _, err := c.Fetch(ctx, "warm", origin); err != nil {
			t.Fatal(err)
		}
	}
	holder := fleet[0]
	waitFor(t, "replica 0's L1 to hold the key", func() bool {
		before := holder.Stats().L1Hits
		if _, err := holder.Fetch(ctx, "held", origin); err != nil {
			t.Fatal(err)
		}
		return holder.Stats().L1Hits > before
	})
	numsub, err := info.PubSubNumSub(ctx, "{fanout:held}:n").Result()
	if err != nil {
		t.Fatal(err)
	}
	writer := fleet[r-1]
	before := redisStats(t, info)
	for i := range sets {
		if err := writer.Set(ctx, "held", "w"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	after := redisStats(t, info)
	last := "w" + strconv.Itoa(sets-1)
	eventually(t, 10*time.Second, func() bool {
		v, _, err := holder.Get(ctx, "held")
		return err == nil && v == last
	}, func() string {
		v, _, err := holder.Get(ctx, "held")
		return fmt.Sprintf("replica 0 serves %q (%v), want %q", v, err, last)
	})
	return fanout{
		replicas:  r,
		bytes:     float64(after.sent-before.sent-before.infoBytes) / sets,
		publishes: float64(after.publishes-before.publishes) / sets,
		receivers: numsub["{fanout:held}:n"],
	}
}

// redisReading is one INFO reading.
type redisReading struct {
	sent      int64 // total_net_output_bytes
	publishes int64 // PUBLISH calls, those inside scripts included
	infoBytes int64 // this INFO reply's size, which the next reading's sent counts
}

func redisStats(t *testing.T, rdb *redis.Client) redisReading {
	t.Helper()
	s, err := rdb.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	r := redisReading{infoBytes: int64(len(s))}
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
			r.sent, _ = strconv.ParseInt(v, 10, 64)
		}
		if rest, ok := strings.CutPrefix(line, "cmdstat_publish:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			r.publishes, _ = strconv.ParseInt(n, 10, 64)
		}
	}
	return r
}
