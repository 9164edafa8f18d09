package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// BenchmarkLockAcquireRelease: one uncontended acquire + release on 1, 3
// and 5 independent redis-servers, stampede's lease against
// go-redsync/redsync (Redlock without a fence). stampede's quorum takes
// two rounds to acquire (grant, then the fence write-back) and one to
// release; redsync one and one; the single-instance lease one and one,
// with a fence. Besides ns/op (acquire + release), it reports the
// acquisitions' own median and 99th percentile (acq-p50-us, acq-p99-us).
func BenchmarkLockAcquireRelease(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			_, clients := redistest.Independent(b, n)
			scripters := make([]redis.Scripter, n)
			pools := make([]redsyncredis.Pool, n)
			for i, c := range clients {
				scripters[i] = c
				pools[i] = goredis.NewPool(c)
			}
			name := redistest.Prefix(b)
			if n == 1 {
				b.Run("impl=stampede-lease", func(b *testing.B) {
					c, err := lease.New(scripters[0], lease.Options{})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					var acq acquisitions
					for b.Loop() {
						began := time.Now()
						l, err := c.Acquire(ctx, name, 10*time.Second)
						acq.add(began)
						if err != nil {
							b.Fatal(err)
						}
						if err := l.Release(ctx); err != nil {
							b.Fatal(err)
						}
					}
					acq.report(b)
				})
			}
			b.Run("impl=stampede-quorum", func(b *testing.B) {
				q, err := lease.NewQuorum(scripters, lease.QuorumOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				var acq acquisitions
				for b.Loop() {
					began := time.Now()
					l, err := q.Acquire(ctx, name, 10*time.Second)
					acq.add(began)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				acq.report(b)
			})
			b.Run("impl=redsync", func(b *testing.B) {
				m := redsync.New(pools...).NewMutex(name+":redsync", redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
				b.ReportAllocs()
				var acq acquisitions
				for b.Loop() {
					began := time.Now()
					err := m.LockContext(ctx)
					acq.add(began)
					if err != nil {
						b.Fatal(err)
					}
					if ok, err := m.UnlockContext(ctx); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
				acq.report(b)
			})
		})
	}
}

// acquisitions records how long each acquisition of a benchmark took.
type acquisitions []time.Duration

func (a *acquisitions) add(began time.Time) { *a = append(*a, time.Since(began)) }

// report adds the median and the 99th percentile, in µs, to the result.
func (a acquisitions) report(b *testing.B) {
	if len(a) == 0 {
		return
	}
	slices.Sort(a)
	at := func(q float64) float64 { return float64(a[int(q*float64(len(a)-1))]) / float64(time.Microsecond) }
	b.ReportMetric(at(0.50), "acq-p50-us")
	b.ReportMetric(at(0.99), "acq-p99-us")
}
