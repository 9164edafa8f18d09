package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// A revalidation cannot bring back a value invalidated while it ran: when
// Clear (a hard invalidation) lands during the compute, the compute runs
// again, and that run sees no previous value (the first run's previous was
// invalidated with it), so an ErrUnchanged answer cannot re-arm it; the
// run's own value answers. Redis and process-local mode.
func TestRevalidationAfterAnInvalidationSeesNoPrevious(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			c, _ := expiredEntry(t, mode, cache.Options{StaleIfError: time.Hour})
			started, release := make(chan struct{}), make(chan struct{})
			var runs atomic.Int32
			var sawAfter atomic.Bool // the run after the Clear saw a previous value
			done := make(chan error, 1)
			var got cache.Result[string]
			go func() {
				var err error
				got, err = c.Fetch(bounded(t, 10*time.Second), "k", func(ctx context.Context) (string, error) {
					_, ok := cache.Previous[string](ctx, "k")
					if runs.Add(1) == 1 {
						close(started)
						<-release
					} else if ok {
						sawAfter.Store(true)
					}
					if ok {
						return "", cache.ErrUnchanged // the origin's 304
					}
					return "rebuilt", nil
				})
				done <- err
			}()
			<-started
			if err := c.Clear(bounded(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			close(release)
			if err := <-done; err != nil || got.Value != "rebuilt" {
				t.Fatalf("a revalidation through a Clear: %+v %v (%d runs); want the value of a run after the Clear", got, err, runs.Load())
			}
			if sawAfter.Load() {
				t.Error("the run after the Clear was handed the cleared value as its previous one")
			}
			if r, err := c.Fetch(context.Background(), "k", func(context.Context) (string, error) { return "again", nil }); err != nil || r.Value != "rebuilt" {
				t.Fatalf("after: %+v %v; want the stored rebuilt value", r, err)
			}
		})
	}
}

// countingCodec is the default msgpack codec, counting its calls.
type countingCodec struct {
	encodes, decodes *atomic.Int64
}

func (c countingCodec) Marshal(v any) ([]byte, error) {
	c.encodes.Add(1)
	return cache.MsgpackCodec{}.Marshal(v)
}

func (c countingCodec) Unmarshal(data []byte, v any) error {
	c.decodes.Add(1)
	return cache.MsgpackCodec{}.Unmarshal(data, v)
}

type report struct {
	ID    int
	Title string
}

// Conditional refresh saves the encode (issue 17): ErrUnchanged re-arms the
// previous value with new windows by rewriting only the envelope's header
// around the bytes it was stored with, so the codec's Marshal is not called;
// the fail-safe re-arm of a failing origin likewise. Redis (single key and
// batch) and process-local mode (which never encodes).
func TestRevalidateSavesTheEncode(t *testing.T) {
	old := report{ID: 42, Title: "old"}
	unchanged := func(context.Context) (report, error) { return report{}, cache.ErrUnchanged }
	for _, mode := range []string{"redis", "local", "batch", "fail-safe"} {
		t.Run(mode, func(t *testing.T) {
			codec := countingCodec{&atomic.Int64{}, &atomic.Int64{}}
			opts := cache.Options{Namespace: redistest.Prefix(t), TTL: time.Minute, StaleIfError: time.Hour, Codec: codec}
			var rdb redis.UniversalClient = redistest.Client(t)
			if mode == "local" {
				rdb = nil
			}
			c := newCache[report](t, rdb, opts)
			clk := cache.NewClock()
			cache.UseClock(c, clk)
			ctx := bounded(t, 10*time.Second)
			if _, err := c.GetOrCompute(ctx, "k", func(context.Context) (report, error) { return old, nil }); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute + time.Millisecond) // expired, kept for stale-if-error
			encodes := codec.encodes.Load()
			switch mode {
			case "batch":
				got, err := c.GetOrComputeMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]report, error) {
					return nil, cache.ErrUnchanged
				})
				if err != nil || got["k"] != old {
					t.Fatalf("batch revalidation: %v %v", got, err)
				}
			case "fail-safe":
				r, err := c.Fetch(ctx, "k", func(context.Context) (report, error) { return report{}, errors.New("origin down") })
				if err != nil || r.Value != old || r.Outcome != cache.Stale || c.Stats().FailSafe != 1 {
					t.Fatalf("fail-safe: %+v %v %+v", r, err, c.Stats())
				}
			default:
				r, err := c.Fetch(ctx, "k", unchanged)
				if err != nil || r.Value != old || r.Outcome != cache.Miss {
					t.Fatalf("revalidated: %+v %v", r, err)
				}
			}
			if n := codec.encodes.Load() - encodes; n != 0 {
				t.Fatalf("re-arming the previous value encoded it %d times", n)
			}
			if mode != "fail-safe" {
				if st := c.Stats(); st.Revalidated != 1 {
					t.Fatalf("Revalidated %d, want 1", st.Revalidated)
				}
				// The bytes written back decode to the previous value, fresh.
				r, err := c.Fetch(ctx, "k", func(context.Context) (report, error) { return report{Title: "rebuilt"}, nil })
				if err != nil || r.Value != old || r.Outcome != cache.Hit {
					t.Fatalf("after the revalidation: %+v %v", r, err)
				}
			}
			if mode == "local" && codec.encodes.Load()+codec.decodes.Load() != 0 {
				t.Fatalf("process-local mode called the codec: %d encodes, %d decodes", codec.encodes.Load(), codec.decodes.Load())
			}
		})
	}
}
