package cache_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkL1Coherence measures cross-replica L1 staleness on loopback:
// replica A fills a key b.N times (each time after the value vanished from
// Redis without an announcement, so only the fill's own announcement can
// tell B), while 4 readers hammer the key on replica B, whose L1 holds the
// previous value. For each fill, stale is from A's call returning to the
// start of B's last read that still returned the previous value (0 when B
// had stopped before A's call returned); new is from A's call returning to
// the end of B's first read returning the new value. It also reports the
// PUBLISH commands Redis ran per fill (INFO commandstats): the fill's
// notification on the key's channel and its announcement on the
// invalidation channel, both inside the one fill script.
//
// load=busy readers never block: on a 2-core machine they keep every P
// busy, and B's pub/sub receiver then waits for the Go scheduler's
// preemption (10 ms slices) before it can apply the announcement: that is
// what the figure shows. load=paced readers pause 100 µs after every 100
// reads (still about a million reads a second on B). Run it with
// -benchtime=300x.
func BenchmarkL1Coherence(b *testing.B) {
	for _, load := range []struct {
		name  string
		pause time.Duration
	}{{"paced", 100 * time.Microsecond}, {"busy", 0}} {
		b.Run("load="+load.name, func(b *testing.B) { benchL1Coherence(b, load.pause) })
	}
}

func benchL1Coherence(b *testing.B, pause time.Duration) {
	ns := redistest.Prefix(b)
	rdb := redistest.Client(b)
	ctx := context.Background()
	opts := cache.Options{Namespace: ns, TTL: time.Hour, WaitTimeout: 10 * time.Second}
	a := newCache[string](b, redistest.Client(b), opts)
	opts.L1Size, opts.L1TTL = 100, time.Hour
	rb := newCache[string](b, redistest.Client(b), opts)
	fill := func(n int) {
		for range 20 {
			if err := rdb.Del(ctx, valueKeyOf(ns, "k")).Err(); err != nil {
				b.Fatal(err)
			}
			r, err := a.Fetch(ctx, "k", func(context.Context) (string, error) { return versioned(n), nil })
			if err == nil && r.Value == versioned(n) {
				return
			}
		}
		b.Fatalf("fill %d did not happen", n)
	}
	fill(0)
	pollFor(b, "B's L1 to hold the key", 10*time.Second, time.Millisecond, func() bool {
		_, _, _ = rb.Get(ctx, "k")
		return rb.Stats().L1Entries == 1
	})

	n := b.N
	lastStart := make([]atomic.Int64, n+1) // per generation, unix ns
	firstEnd := make([]atomic.Int64, n+1)
	filled := make([]int64, n+1)
	var served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		wg.Go(func() {
			for i := 0; i < 100_000_000; i++ { // bounded; stopped by stop
				select {
				case <-stop:
					return
				default:
				}
				if pause > 0 && i%100 == 99 {
					time.Sleep(pause) // paced load, not synchronisation
				}
				start := time.Now().UnixNano()
				v, found, err := rb.Get(ctx, "k")
				end := time.Now().UnixNano()
				reads.Add(1)
				g, ok := versionOf(v)
				if err != nil || !found || !ok || g > n {
					continue
				}
				raiseTo(&lastStart[g], start)
				for cur := firstEnd[g].Load(); (cur == 0 || end < cur) && !firstEnd[g].CompareAndSwap(cur, end); cur = firstEnd[g].Load() {
				}
				raiseTo(&served, int64(g))
			}
		})
	}
	publishes := func() int64 { return commandCalls(b, rdb, "publish") }
	pub0 := publishes()
	hits0 := rb.Stats().L1Hits
	b.ResetTimer()
	for i := 1; i <= n; i++ {
		fill(i)
		filled[i] = time.Now().UnixNano()
		deadline := time.Now().Add(10 * time.Second)
		for served.Load() < int64(i) { // B's readers see it: next fill
			if time.Now().After(deadline) {
				b.Fatalf("B never served fill %d", i)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	pubs := publishes() - pub0

	var stale, fresh []time.Duration
	for i := 1; i <= n; i++ {
		stale = append(stale, time.Duration(max(lastStart[i-1].Load()-filled[i], 0)))
		fresh = append(fresh, time.Duration(max(firstEnd[i].Load()-filled[i], 0)))
	}
	slices.Sort(stale)
	slices.Sort(fresh)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(stale[len(stale)/2]), "stale-p50-ms")
	b.ReportMetric(ms(stale[len(stale)*99/100]), "stale-p99-ms")
	b.ReportMetric(ms(stale[len(stale)-1]), "stale-max-ms")
	b.ReportMetric(ms(fresh[len(fresh)/2]), "new-p50-ms")
	b.ReportMetric(ms(fresh[len(fresh)*99/100]), "new-p99-ms")
	b.ReportMetric(float64(pubs)/float64(n), "publish/fill")
	b.ReportMetric(float64(rb.Stats().L1Hits-hits0)/float64(reads.Load()), "B-L1-hit-ratio")
	b.ReportMetric(float64(reads.Load())/float64(n), "B-reads/fill")
}

var callsRe = regexp.MustCompile(`calls=(\d+)`)

// commandCalls is how many times Redis ran command, from INFO commandstats.
func commandCalls(tb testing.TB, rdb redis.UniversalClient, command string) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	re := regexp.MustCompile(`cmdstat_` + command + `:(\S+)`)
	m := re.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	c := callsRe.FindStringSubmatch(m[1])
	if c == nil {
		return 0
	}
	n, _ := strconv.ParseInt(c[1], 10, 64)
	return n
}
