package cache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// nsKeys lists the Redis keys of namespace ns.
func nsKeys(t *testing.T, rdb *redis.Client, ns string) []string {
	t.Helper()
	var out []string
	iter := rdb.Scan(context.Background(), 0, "{"+ns+":*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// At rest an entry is one Redis key, its value: no fence, and no lease once
// its compute ended, however it ended (filled, failed, panicked, fenced out
// by a Set or Delete, refreshed, batch-filled, negative); a Delete leaves
// nothing.
func TestOneKeyPerEntryAtRest(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	clk := cache.NewClock()
	c := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Minute, Stale: time.Hour})
	cache.UseClock(c, clk)
	ok := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return v, nil }
	}
	for i := range 20 {
		if _, err := c.GetOrCompute(ctx, "m"+strconv.Itoa(i), ok("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.GetOrComputeMany(ctx, []string{"b1", "b2", "b3"}, func(_ context.Context, ks []string) (map[string]string, error) {
		m := map[string]string{}
		for _, k := range ks {
			m[k] = k
		}
		return m, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetOrCompute(ctx, "failed", func(context.Context) (string, error) { return "", errors.New("origin down") }); err == nil {
		t.Fatal("no error")
	}
	if _, err := c.GetOrCompute(ctx, "gone", func(context.Context) (string, error) { return "", cache.ErrNotFound }); !errors.Is(err, cache.ErrNotFound) {
		t.Fatal(err)
	}
	// A compute that a Set overtakes, and one that a Delete overtakes.
	for _, mode := range []string{"set", "delete"} {
		o := &origin[string]{value: "late", started: make(chan struct{}, 1), release: make(chan struct{})}
		done := make(chan struct{})
		go func() { defer close(done); _, _ = c.GetOrCompute(ctx, mode, o.fn) }()
		<-o.started
		var err error
		if mode == "set" {
			err = c.Set(ctx, mode, "admin")
		} else {
			err = c.Delete(ctx, mode)
		}
		if err != nil {
			t.Fatal(err)
		}
		close(o.release)
		<-done
	}
	// A stale entry refreshed in the background.
	clk.Advance(2 * time.Minute)
	if r, err := c.Fetch(ctx, "m0", ok("v2")); err != nil || r.Outcome != cache.Stale {
		t.Fatalf("%+v %v", r, err)
	}
	waitFor(t, "the refresh", func() bool { return c.Stats().Refreshes == 1 && len(nsKeys(t, rdb, ns)) == 25 })
	if err := c.Delete(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, k := range []string{"b1", "b2", "b3", "gone", "set"} {
		want = append(want, "{"+ns+":"+k+"}:v")
	}
	for i := range 20 {
		if i != 1 {
			want = append(want, "{"+ns+":m"+strconv.Itoa(i)+"}:v")
		}
	}
	sort.Strings(want)
	waitFor(t, "the refresh's fill", func() bool { return slices.Equal(nsKeys(t, rdb, ns), want) })
	if got := nsKeys(t, rdb, ns); !slices.Equal(got, want) {
		t.Fatalf("keys at rest:\n%s\nwant one per entry:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// memoryUsed is INFO memory's used_memory.
func memoryUsed(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// BenchmarkMemoryPerEntry measures Redis memory per cached entry on a
// redis-server of its own: 20,000 entries filled through GetOrComputeMany
// (TTL 1h), against a raw SET (PX 1h) of the same value bytes under the
// same key names, INFO memory before and after, keys counted. Run it with
// -benchtime=1x.
func BenchmarkMemoryPerEntry(b *testing.B) {
	const entries = 20000
	srv, err := redisserver.Start(redisserver.Options{Args: []string{"--save", "", "--appendonly", "no"}})
	if err != nil {
		b.Skip(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	for _, size := range []int{100, 1024} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			value := []byte(strings.Repeat("x", size))
			names := make([]string, entries)
			for i := range names {
				names[i] = fmt.Sprintf("key:%08d", i)
			}
			measure := func(fill func()) (perEntry float64, keys int64) {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				before := memoryUsed(b, rdb)
				fill()
				after := memoryUsed(b, rdb)
				keys = rdb.DBSize(ctx).Val()
				return float64(after-before) / entries, keys
			}
			for b.Loop() {
				raw, rawKeys := measure(func() {
					for at := 0; at < entries; at += 500 {
						pipe := rdb.Pipeline()
						for _, n := range names[at : at+500] {
							pipe.Set(ctx, "{mem:"+n+"}:v", value, time.Hour)
						}
						if _, err := pipe.Exec(ctx); err != nil {
							b.Fatal(err)
						}
					}
				})
				c, err := cache.New[[]byte](rdb, cache.Options{Namespace: "mem", TTL: time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				v2, v2Keys := measure(func() {
					for at := 0; at < entries; at += 500 {
						if _, err := c.GetOrComputeMany(ctx, names[at:at+500], func(_ context.Context, ks []string) (map[string][]byte, error) {
							m := make(map[string][]byte, len(ks))
							for _, k := range ks {
								m[k] = value
							}
							return m, nil
						}); err != nil {
							b.Fatal(err)
						}
					}
				})
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(raw, "raw-B/entry")
				b.ReportMetric(v2, "cache-B/entry")
				b.ReportMetric(v2/raw, "ratio")
				b.ReportMetric(float64(rawKeys)/entries, "raw-keys/entry")
				b.ReportMetric(float64(v2Keys)/entries, "cache-keys/entry")
			}
		})
	}
}

// BenchmarkFillToWaiter measures, for waiters on other replicas behind a
// proxy that adds 10 ms each way (RTT 20 ms), the time from the moment the
// leader's compute returned to each waiter's return. The leader talks to
// Redis directly, so the figure is what the waiters pay after the fill: with
// the value in the notification, one one-way trip (0.5 RTT).
//
// In the same run it measures the floor: a raw PUBLISH of a payload the
// size of the fill's envelope, from a direct client, to raw subscribers
// behind the same proxy, from before the PUBLISH to each subscriber's
// ReceiveMessage returning (floor-*); overhead-p50-ms is our p50 above the
// floor's. Run it with -benchtime=1x.
func BenchmarkFillToWaiter(b *testing.B) {
	const (
		oneWay   = 10 * time.Millisecond
		waiters  = 4
		rounds   = 25
		valueLen = 1024
	)
	p, err := faultproxy.New(redistest.Addr(b))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ns := redistest.Prefix(b)
	opts := cache.Options{Namespace: ns, LeaseTTL: 10 * time.Second, WaitTimeout: time.Minute, PollInterval: time.Minute}
	leader := newCache[string](b, redistest.Client(b), opts)
	var ws []*counted
	for range waiters {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		defer rdb.Close()
		rt := &roundTrips{}
		rdb.AddHook(rt)
		ws = append(ws, &counted{c: newCache[string](b, rdb, opts), rt: rt})
	}
	// The floor's subscribers, behind the same proxy.
	ctx := context.Background()
	floorChannel := ns + ":floor"
	subs := make([]*redis.PubSub, waiters)
	for i := range subs {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		defer rdb.Close()
		subs[i] = rdb.Subscribe(ctx, floorChannel)
		defer subs[i].Close()
		if _, err := subs[i].Receive(ctx); err != nil { // the confirmation
			b.Fatal(err)
		}
	}
	direct := redistest.Client(b)
	p.SetLatency(oneWay)
	value := strings.Repeat("v", valueLen)
	for b.Loop() {
		var lat []time.Duration
		for r := range rounds {
			key := "k" + strconv.Itoa(r)
			started, release := make(chan struct{}), make(chan struct{})
			var filledAt time.Time
			led := make(chan error, 1)
			go func() {
				_, err := leader.GetOrCompute(ctx, key, func(context.Context) (string, error) {
					close(started)
					<-release
					filledAt = time.Now()
					return value, nil
				})
				led <- err
			}()
			<-started
			marks := make([]int64, len(ws))
			for i, w := range ws {
				marks[i] = w.rt.n.Load()
			}
			var wg sync.WaitGroup
			back := make([]time.Time, len(ws))
			for i, w := range ws {
				wg.Go(func() {
					r, err := w.c.Fetch(ctx, key, func(context.Context) (string, error) { return "", errors.New("not me") })
					back[i] = time.Now()
					if err != nil || r.Outcome != cache.Waited {
						b.Errorf("waiter: %+v %v", r, err)
					}
				})
			}
			// Every waiter has subscribed and its re-read has returned (GET,
			// claim, GET): it waits for the notification.
			for i, w := range ws {
				for w.rt.n.Load()-marks[i] < 3 {
					time.Sleep(time.Millisecond)
				}
			}
			close(release)
			if err := <-led; err != nil {
				b.Fatal(err)
			}
			wg.Wait()
			for _, t := range back {
				lat = append(lat, t.Sub(filledAt))
			}
		}
		// The floor: the same path without the cache, timed the same way.
		envLen, err := direct.StrLen(ctx, valueKeyOf(ns, "k0")).Result()
		if err != nil || envLen < valueLen {
			b.Fatalf("the fill's envelope: %d bytes, %v", envLen, err)
		}
		payload := strings.Repeat("f", int(envLen))
		var floor []time.Duration
		for range rounds {
			var wg sync.WaitGroup
			back := make([]time.Time, len(subs))
			for i, sub := range subs {
				wg.Go(func() {
					if _, err := sub.ReceiveMessage(ctx); err != nil {
						b.Error(err)
					}
					back[i] = time.Now()
				})
			}
			// A subscriber whose goroutine starts late still finds the
			// message in its socket: it arrives 10 ms after the PUBLISH.
			sent := time.Now()
			if err := direct.Publish(ctx, floorChannel, payload).Err(); err != nil {
				b.Fatal(err)
			}
			wg.Wait()
			for _, t := range back {
				floor = append(floor, t.Sub(sent))
			}
		}
		slices.Sort(lat)
		slices.Sort(floor)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
		b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
		b.ReportMetric(ms(lat[len(lat)/2])/ms(2*oneWay), "p50-RTT")
		b.ReportMetric(ms(floor[len(floor)/2]), "floor-p50-ms")
		b.ReportMetric(ms(floor[len(floor)*99/100]), "floor-p99-ms")
		b.ReportMetric(ms(lat[len(lat)/2])-ms(floor[len(floor)/2]), "overhead-p50-ms")
	}
}
