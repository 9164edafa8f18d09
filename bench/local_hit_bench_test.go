package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// localReplica is one replica's coherent local tier: rueidis' DoCache
// (server-assisted client-side caching, RESP3 tracking) or stampede's L1.
type localReplica struct {
	read  func(ctx context.Context) (string, error)
	write func(ctx context.Context, v string) error
	close func()
}

func newRueidisReplica(b *testing.B, key string) localReplica {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(b)}})
	if err != nil {
		b.Fatal(err)
	}
	return localReplica{
		read: func(ctx context.Context) (string, error) {
			return c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Hour).ToString()
		},
		write: func(ctx context.Context, v string) error {
			return c.Do(ctx, c.B().Set().Key(key).Value(v).Build()).Error()
		},
		close: c.Close,
	}
}

func newStampedeReplica(b *testing.B, ns, key string) localReplica {
	c, err := cache.New[string](redistest.Client(b), cache.Options{Namespace: ns, TTL: time.Hour, L1Size: 1024, L1TTL: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) (string, error) { return "", fmt.Errorf("%q was not cached", key) }
	return localReplica{
		read:  func(ctx context.Context) (string, error) { return c.GetOrCompute(ctx, key, fn) },
		write: func(ctx context.Context, v string) error { return c.Set(ctx, key, v) },
		close: func() { _ = c.Close() },
	}
}

// newLocalPair returns two replicas of impl sharing one key, the first
// value written and read on both (so it sits in the reader's local tier).
func newLocalPair(b *testing.B, impl string) (writer, reader localReplica) {
	key := redistest.Prefix(b) + ":k"
	switch impl {
	case "rueidis-docache":
		writer, reader = newRueidisReplica(b, key), newRueidisReplica(b, key)
	case "stampede-l1":
		ns := redistest.Prefix(b)
		writer, reader = newStampedeReplica(b, ns, key), newStampedeReplica(b, ns, key)
	default:
		b.Fatalf("unknown impl %q", impl)
	}
	b.Cleanup(writer.close)
	b.Cleanup(reader.close)
	ctx := context.Background()
	if err := writer.write(ctx, "v0"); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // until the value is served from the reader's local tier
		v, err := reader.read(ctx)
		if err == nil && v == "v0" {
			if _, err := reader.read(ctx); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: reader never served v0: %q %v", impl, v, err)
		}
		time.Sleep(time.Millisecond)
	}
	return writer, reader
}

var localImpls = []string{"rueidis-docache", "stampede-l1"}

// BenchmarkLocalHit: a hit answered from the process's coherent local tier,
// rueidis' DoCache against stampede's L1 (GetOrCompute), one goroutine and
// 8 (GOMAXPROCS 2 x 4) in parallel, on one key.
//
//	go test -run XXX -bench BenchmarkLocalHit -count 3 .
func BenchmarkLocalHit(b *testing.B) {
	ctx := context.Background()
	for _, impl := range localImpls {
		_, r := newLocalPair(b, impl)
		b.Run("impl="+impl+"/par=1", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.read(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("impl="+impl+"/par=8", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := r.read(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLocalCoherence: cross-replica staleness of each local tier on
// loopback. Replica A writes a new value b.N times (rueidis: SET; stampede:
// Set), while 4 readers on replica B, whose local tier holds the previous
// value, read the key, pausing 100 µs every 100 reads. For each write,
// stale is from A's write returning to the start of B's last read that
// still returned the previous value (0 when none started after it); new is
// from A's write returning to the end of B's first read of the new value.
// Reports p50 and p99 of each in ms. Run it with -benchtime=300x.
func BenchmarkLocalCoherence(b *testing.B) {
	for _, impl := range localImpls {
		b.Run("impl="+impl, func(b *testing.B) { benchLocalCoherence(b, impl) })
	}
}

func benchLocalCoherence(b *testing.B, impl string) {
	ctx := context.Background()
	w, r := newLocalPair(b, impl)
	n := b.N
	lastStart := make([]atomic.Int64, n+1) // per generation, unix ns
	firstEnd := make([]atomic.Int64, n+1)
	written := make([]int64, n+1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%100 == 99 {
					time.Sleep(100 * time.Microsecond)
				}
				start := time.Now().UnixNano()
				v, err := r.read(ctx)
				end := time.Now().UnixNano()
				if err != nil {
					continue
				}
				g, err := strconv.Atoi(strings.TrimPrefix(v, "v"))
				if err != nil || g > n {
					continue
				}
				for cur := lastStart[g].Load(); start > cur && !lastStart[g].CompareAndSwap(cur, start); cur = lastStart[g].Load() {
				}
				firstEnd[g].CompareAndSwap(0, end)
			}
		})
	}
	b.ResetTimer()
	for g := 1; g <= n; g++ {
		if err := w.write(ctx, "v"+strconv.Itoa(g)); err != nil {
			b.Fatal(err)
		}
		written[g] = time.Now().UnixNano()
		deadline := time.Now().Add(10 * time.Second)
		for firstEnd[g].Load() == 0 { // B serves the new value before the next write
			if time.Now().After(deadline) {
				b.Fatalf("%s: B never served v%d", impl, g)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	var stale, fresh []float64
	for g := 1; g <= n; g++ {
		stale = append(stale, max(float64(lastStart[g-1].Load()-written[g]), 0)/1e6)
		fresh = append(fresh, float64(firstEnd[g].Load()-written[g])/1e6)
	}
	pct := func(xs []float64, p float64) float64 {
		slices.Sort(xs)
		return xs[min(len(xs)-1, int(p*float64(len(xs))))]
	}
	b.ReportMetric(pct(stale, 0.5), "stale-p50-ms")
	b.ReportMetric(pct(stale, 0.99), "stale-p99-ms")
	b.ReportMetric(pct(fresh, 0.5), "new-p50-ms")
	b.ReportMetric(pct(fresh, 0.99), "new-p99-ms")
}
