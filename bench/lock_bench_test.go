package main

import (
	"context"
	"fmt"
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
// with a fence.
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
					for b.Loop() {
						l, err := c.Acquire(ctx, name, 10*time.Second)
						if err != nil {
							b.Fatal(err)
						}
						if err := l.Release(ctx); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("impl=stampede-quorum", func(b *testing.B) {
				q, err := lease.NewQuorum(scripters, lease.QuorumOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					l, err := q.Acquire(ctx, name, 10*time.Second)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("impl=redsync", func(b *testing.B) {
				m := redsync.New(pools...).NewMutex(name+":redsync", redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
				b.ReportAllocs()
				for b.Loop() {
					if err := m.LockContext(ctx); err != nil {
						b.Fatal(err)
					}
					if ok, err := m.UnlockContext(ctx); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			})
		})
	}
}
