package cache_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// What a read costs Redis does not grow with the fleet it is spread over:
// the same traffic (sparseFleetRate reads a second, each on the next
// replica in turn) over a fleet of 8 replicas and over one of 160 (each
// its own go-redis client and one cache, default options, L1 on) costs
// about as many Redis commands per read. At 8 replicas each is read every
// 125 ms, at 160 every 2.5 s. Before (issue 38), each read kept its
// replica's heartbeat running for max(3 s, 4δ): a replica read every
// 2.5 s PINGed 40 times a second, about 100 PINGs per read, against 5 at
// 8 replicas. The heartbeat's run now follows its decisions (a few PINGs
// per decision wanting it, up to that tail under steady traffic; see
// internal/notify's heartbeat), so a replica read seldom pays a marks
// read on its request path instead, as on a Cluster.
//
// The windows measure rates on Redis' own counters (INFO commandstats, on
// a redis-server of the test's own), driven by a bounded schedule; they
// are not waits for an event.
func TestCommandsPerReadDoNotGrowWithAFleetSpreadThin(t *testing.T) {
	// Parallel: it waits on its own redis-server's schedule, and counts
	// commands, not time (docs/testing.md: the tests that spend their time
	// waiting run four at a time).
	t.Parallel()
	small := sparseFleetCost(t, 8, 6*time.Second)
	large := sparseFleetCost(t, 160, 6*time.Second)
	t.Logf("FIGURE 8 replicas: %s", small)
	t.Logf("FIGURE 160 replicas: %s", large)
	if os.Getenv("STAMPEDE_FLEET_FIGURES") != "" {
		return // figures only
	}
	if bound := max(1.5*small.perRead(), small.perRead()+3); large.perRead() > bound {
		t.Fatalf("the same traffic cost Redis %.1f commands per read over 160 replicas against %.1f over 8 (want at most %.1f): %s",
			large.perRead(), small.perRead(), bound, large)
	}
}

// sparseFleetRate is the reads a second over the whole fleet.
const sparseFleetRate = 64

// fleetCost is what a measured window cost Redis.
type fleetCost struct {
	reads    int
	commands int64
	byName   map[string]int64
	took     time.Duration
}

func (f fleetCost) perRead() float64 { return float64(f.commands) / float64(max(f.reads, 1)) }

func (f fleetCost) String() string {
	names := make([]string, 0, len(f.byName))
	for n := range f.byName {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return f.byName[names[i]] > f.byName[names[j]] })
	var b strings.Builder
	fmt.Fprintf(&b, "%d reads in %s, %d commands, %.2f per read (", f.reads, f.took.Round(time.Millisecond), f.commands, f.perRead())
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f", n, float64(f.byName[n])/float64(max(f.reads, 1)))
	}
	b.WriteString(")")
	return b.String()
}

// sparseFleetCost builds r replicas (each its own client, one cache, in
// one namespace) on a redis-server of the test's own, makes one call on
// each, then reads sparseFleetRate times a second for 1 s unmeasured and
// window measured, each read on the next replica in turn, and returns
// what the measured window cost Redis.
func sparseFleetCost(t *testing.T, r int, window time.Duration) fleetCost {
	t.Helper()
	servers, clients := redistest.Independent(t, 1)
	addr, info := servers[0].Addr(), clients[0]
	ctx := context.Background()
	fleet := make([]*cache.Cache[string], r)
	for i := range fleet {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
		t.Cleanup(func() { _ = rdb.Close() })
		fleet[i] = newCacheAsConfigured[string](t, rdb, cache.Options{Namespace: "sparse"})
	}
	origin := func(context.Context) (string, error) { return "v", nil }
	for _, c := range fleet {
		if _, err := c.Fetch(ctx, "k", origin); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	read := func(c *cache.Cache[string]) {
		defer wg.Done()
		if _, err := c.Fetch(ctx, "k", origin); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	every := time.Second / sparseFleetRate
	lead := int(time.Second / every)
	total := lead + int(window/every)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var before map[string]int64
	var start time.Time
	for i := range total { // bounded: total reads
		if i == lead {
			wg.Wait() // the lead-in's reads are not counted
			before, start = callsByCommand(t, info), time.Now()
		}
		<-tick.C // the traffic's pace, not a wait for an event
		wg.Add(1)
		go read(fleet[i%r])
	}
	wg.Wait()
	after := callsByCommand(t, info)
	if len(errs) > 0 {
		t.Fatalf("%d reads failed, the first: %v", len(errs), errs[0])
	}
	f := fleetCost{reads: total - lead, byName: map[string]int64{}, took: time.Since(start)}
	for n, v := range after {
		if d := v - before[n]; d > 0 {
			f.byName[n] = d
			f.commands += d
		}
	}
	return f
}

// callsByCommand returns the calls Redis counted per command, INFO left out.
func callsByCommand(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for line := range strings.Lines(s) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		calls[strings.TrimPrefix(name, "cmdstat_")] = v
	}
	return calls
}
