package cache

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkL1Hit compares a GetOrCompute answered from L1 with the bare L1
// lookup it is built on.
func BenchmarkL1Hit(b *testing.B) {
	ctx := context.Background()
	c, err := New[[]byte](redistest.Client(b), Options{Namespace: redistest.Prefix(b), TTL: time.Hour, L1Size: 1024, L1TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fn := func(context.Context) ([]byte, error) { return []byte("value"), nil }
	for !c.synced.Load() {
		time.Sleep(time.Millisecond) // the invalidation subscription comes up asynchronously
	}
	if _, err := c.GetOrCompute(ctx, "hot", fn); err != nil {
		b.Fatal(err)
	}
	if _, ok := c.l1.get("hot", time.Now()); !ok {
		b.Fatal("not in L1")
	}
	b.Run("impl=bare-l1", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, ok := c.l1.get("hot", time.Now()); !ok {
					b.Error("miss")
					return
				}
			}
		})
	})
	b.Run("impl=stampede", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.GetOrCompute(ctx, "hot", fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
