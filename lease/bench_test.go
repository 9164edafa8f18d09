package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// BenchmarkAcquireRelease compares a lease (one script to acquire with a
// fence, one to release by token) with the bare SET NX PX + DEL round trips
// that offer neither fencing nor a safe release.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.Client(b)
	name := redistest.Prefix(b)
	b.Run("impl=set-nx-px+del", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ok, err := rdb.SetNX(ctx, name+":bare", "token", 10*time.Second).Result()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := rdb.Del(ctx, name+":bare").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=lease", func(b *testing.B) {
		c, err := lease.New(redis.Scripter(rdb), lease.Options{})
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
