package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Conditional refresh: inside fn the previous (here expired) value is
// available, fn answers ErrUnchanged, and the previous value is stored again
// fresh without fn building it; Redis and process-local mode, single key
// and batch.
func TestRevalidateWithPrevious(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour}) // kept past its TTL, so there is a previous value
			var saw string
			r, err := c.Fetch(bounded(t, 10*time.Second), "k", func(ctx context.Context) (string, error) {
				prev, ok := cache.Previous[string](ctx, "k")
				if !ok {
					return "", errors.New("no previous value")
				}
				saw = prev
				return "", fmt.Errorf("origin: 304: %w", cache.ErrUnchanged)
			})
			if err != nil || r.Value != "old" || r.Outcome != cache.Miss || saw != "old" {
				t.Fatalf("revalidated: %+v %v (fn saw %q)", r, err, saw)
			}
			if st := c.Stats(); st.Revalidated != 1 || st.ComputeErrors != 0 {
				t.Fatalf("stats %+v", st)
			}
			if r, err := c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "rebuilt", nil }); err != nil || r.Value != "old" || r.Outcome != cache.Hit {
				t.Fatalf("after the revalidation the previous value is fresh again: %+v %v", r, err)
			}
		})
	}
	t.Run("batch", func(t *testing.T) {
		ns := redistest.Prefix(t)
		rdb := redistest.Client(t)
		opts := cache.Options{Namespace: ns, StaleIfError: time.Hour}
		clk := writeStale(t, rdb, ns, "a", "old-a", opts)
		writeStaleAt(t, clk, rdb, ns, "b", "old-b", opts)
		c := clocked(clk, newCache[string](t, rdb, opts))
		got, err := c.GetOrComputeMany(bounded(t, 10*time.Second), []string{"a", "b"}, func(ctx context.Context, keys []string) (map[string]string, error) {
			for _, k := range keys {
				if v, ok := cache.Previous[string](ctx, k); !ok || v != "old-"+k {
					return nil, fmt.Errorf("previous of %s: %q %v", k, v, ok)
				}
			}
			return nil, cache.ErrUnchanged
		})
		if err != nil || got["a"] != "old-a" || got["b"] != "old-b" || c.Stats().Revalidated != 2 {
			t.Fatalf("batch revalidation: %v %v %+v", got, err, c.Stats())
		}
	})
	t.Run("no previous value", func(t *testing.T) {
		c := newCache[string](t, redistest.Client(t), cache.Options{})
		_, err := c.GetOrCompute(bounded(t, 10*time.Second), "missing", func(ctx context.Context) (string, error) {
			if _, ok := cache.Previous[string](ctx, "missing"); ok {
				t.Error("a previous value for a missing key")
			}
			return "", cache.ErrUnchanged
		})
		if !errors.Is(err, cache.ErrUnchanged) {
			t.Fatalf("ErrUnchanged without a previous value: %v", err)
		}
	})
}
