package cache_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// An idle fleet costs Redis (almost) nothing, however many caches each
// process holds: R replicas (each its own go-redis client) × N caches,
// default options, after one call on each cache, send Redis at most one
// command a second per replica once their heartbeats have gone quiet
// (issue 38). Before, every cache PINGed its subscription 4/δ times a
// second whatever its traffic: 40 a second per cache, 160 per replica
// here. What remains is the idle probe, one PING every 2 s per client.
//
// The window is a measurement of a rate on Redis' own counters, on a
// redis-server of the test's own, not a wait for an event.
func TestIdleFleetCostsAtMostOneCommandPerSecondPerReplica(t *testing.T) {
	const replicas, caches = 8, 4
	rate, _ := idleCommandsPerSecond(t, replicas, caches, 3*time.Second)
	t.Logf("%d replicas × %d caches, idle: %.1f Redis commands/s (%.2f per replica)", replicas, caches, rate, rate/replicas)
	if rate > replicas {
		t.Fatalf("idle fleet of %d replicas × %d caches sent Redis %.1f commands/s, want at most %d (one per replica)", replicas, caches, rate, replicas)
	}
}

// TestIdleFleetCostFigures logs the idle cost of a few fleet shapes for
// docs/operating.md; set STAMPEDE_FLEET_FIGURES=1 to run it.
func TestIdleFleetCostFigures(t *testing.T) {
	if os.Getenv("STAMPEDE_FLEET_FIGURES") == "" {
		t.Skip("set STAMPEDE_FLEET_FIGURES=1 to measure the idle fleet figures")
	}
	for _, shape := range []struct{ r, n int }{{8, 1}, {8, 4}, {64, 1}} {
		t.Run(strconv.Itoa(shape.r)+"x"+strconv.Itoa(shape.n), func(t *testing.T) {
			rate, conns := idleCommandsPerSecond(t, shape.r, shape.n, 5*time.Second)
			t.Logf("FIGURE %d replicas × %d caches: %.1f idle Redis commands/s, %.2f per replica; %d pub/sub connections", shape.r, shape.n, rate, rate/float64(shape.r), conns)
		})
	}
}

// idleCommandsPerSecond builds r clients × n caches on a redis-server of
// the test's own, makes one call on each cache, waits until every
// heartbeat has stopped, and returns the commands per second Redis
// received over window (INFO commandstats, the INFOs themselves left out)
// and the pub/sub connections it holds then.
func idleCommandsPerSecond(t *testing.T, r, n int, window time.Duration) (rate float64, pubsub int) {
	t.Helper()
	servers, clients := redistest.Independent(t, 1)
	addr, info := servers[0].Addr(), clients[0]
	ctx := context.Background()
	var all []*cache.Cache[string]
	for range r {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		for i := range n {
			c := newCacheAsConfigured[string](t, rdb, cache.Options{Namespace: "fleet-" + strconv.Itoa(i)})
			all = append(all, c)
		}
	}
	for i, c := range all {
		if _, err := c.Fetch(ctx, "k"+strconv.Itoa(i%n), func(context.Context) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
	}
	pollFor(t, "every heartbeat to stop once its cache is idle", 30*time.Second, 50*time.Millisecond, func() bool {
		for _, c := range all {
			if cache.Heartbeating(c) {
				return false
			}
		}
		return true
	})
	before := callsButInfo(t, info)
	start := time.Now()
	time.Sleep(window)
	after := callsButInfo(t, info)
	took := time.Since(start)
	return float64(after-before) / took.Seconds(), pubsubConns(t, info)
}

// callsButInfo returns the calls Redis counted for every command but INFO.
func callsButInfo(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for line := range strings.Lines(s) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		total += v
	}
	return total
}
