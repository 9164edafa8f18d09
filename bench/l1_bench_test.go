package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/maypok86/otter/v2"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkL1Candidates: the in-process lookups the L1 tier could have been
// built on, against stampede's own L1 reached through GetOrCompute (which
// adds key checks, counters and the Result). 1,024 hot keys, parallel.
func BenchmarkL1Candidates(b *testing.B) {
	const n = 1024
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	val := []byte("value")
	b.Run("impl=golang-lru", func(b *testing.B) {
		c, _ := lru.New[string, []byte](4 * n)
		for _, k := range keys {
			c.Add(k, val)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok := c.Get(keys[i%n]); !ok {
					b.Error("miss")
					return
				}
				i++
			}
		})
	})
	b.Run("impl=otter", func(b *testing.B) {
		c := otter.Must(&otter.Options[string, []byte]{MaximumSize: 4 * n, ExpiryCalculator: otter.ExpiryWriting[string, []byte](time.Hour)})
		for _, k := range keys {
			c.Set(k, val)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok := c.GetIfPresent(keys[i%n]); !ok {
					b.Error("miss")
					return
				}
				i++
			}
		})
	})
	b.Run("impl=stampede-l1", func(b *testing.B) {
		c, err := cache.New[[]byte](redistest.Client(b), cache.Options{Namespace: redistest.Prefix(b), TTL: time.Hour, L1Size: 4 * n, L1TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		fn := func(context.Context) ([]byte, error) { return val, nil }
		deadline := time.Now().Add(10 * time.Second)
		for c.Stats().L1Entries < n {
			for _, k := range keys {
				_, _ = c.GetOrCompute(ctx, k, fn)
			}
			if time.Now().After(deadline) {
				b.Fatal("L1 never filled")
			}
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := c.GetOrCompute(ctx, keys[i%n], fn); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}
