package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// page is a value msgpack cannot encode (a func field) that says its
// weight: process-local mode holds it as it is, and MaxLocalBytes bounds it
// by what Weight says.
type page struct {
	Body   []byte
	Render func() string
}

func (p page) Weight() int { return len(p.Body) }

var _ cache.Weigher = page{}

// Issue 37, item 12: the process-local store is bounded by MaxLocalBytes,
// whatever writes fill it (Set, GetOrCompute, GetOrComputeMany, from 8
// goroutines at once) and whatever says the values' weight (a []byte's or
// a string's length, a Weigher): what it holds (Stats().LocalBytes, and its
// entries counted at their values' size) stays within the bound, and the
// entry just written is there.
func TestLocalStoreBoundedByMaxLocalBytes(t *testing.T) {
	const value = 32 << 10
	const bound = 1 << 20 // 32 such values at most, 256 written
	t.Run("[]byte", func(t *testing.T) {
		fillPastMaxLocalBytes(t, value, bound, func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, value) })
	})
	t.Run("string", func(t *testing.T) {
		fillPastMaxLocalBytes(t, value, bound, func(i int) string { return strings.Repeat(string(rune('a'+i%26)), value) })
	})
	t.Run("Weigher", func(t *testing.T) {
		fillPastMaxLocalBytes(t, value, bound, func(i int) page {
			return page{Body: make([]byte, value), Render: func() string { return fmt.Sprint(i) }}
		})
	})
}

// fillPastMaxLocalBytes writes 256 distinct keys of values weighing size
// bytes each (made by mk) into a Cache without Redis whose MaxLocalBytes
// is bound, and checks what it holds.
func fillPastMaxLocalBytes[V any](t *testing.T, size, bound int, mk func(i int) V) {
	t.Helper()
	c := newCache[V](t, nil, cache.Options{TTL: time.Hour, MaxLocalBytes: int64(bound)})
	ctx := bounded(t, 30*time.Second)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 32 {
				k, v := fmt.Sprint(g, "-", i), mk(i)
				switch i % 3 {
				case 0:
					if err := c.Set(ctx, k, v); err != nil {
						t.Errorf("Set %s: %v", k, err)
					}
				case 1:
					_, _ = c.GetOrCompute(ctx, k, func(context.Context) (V, error) { return v, nil })
				case 2:
					_, _ = c.GetOrComputeMany(ctx, []string{k}, func(_ context.Context, ks []string) (map[string]V, error) {
						return map[string]V{k: v}, nil
					})
				}
			}
		})
	}
	waitGroupWithin(t, &wg, 30*time.Second, "8 writers of 32 keys each")
	held := func(when string) {
		t.Helper()
		st := c.Stats()
		if st.LocalBytes > int64(bound) || st.LocalBytes == 0 {
			t.Fatalf("%s: LocalBytes %d with MaxLocalBytes %d, want (0, %d]", when, st.LocalBytes, bound, bound)
		}
		if st.LocalEntries*size > bound {
			t.Fatalf("%s: %d entries of %d bytes held with MaxLocalBytes %d", when, st.LocalEntries, size, bound)
		}
	}
	held("after 256 distinct keys")
	last := mk(7)
	if err := c.Set(ctx, "last", last); err != nil {
		t.Fatal(err)
	}
	if _, found, err := c.Get(ctx, "last"); err != nil || !found {
		t.Fatalf("the entry just written: found=%v err=%v", found, err)
	}
	held("after one more")
}

// An entry that weighs more than MaxLocalBytes/16 (the bounded map's share
// per shard) is not stored: Set refuses it with ErrValueTooLarge and
// leaves the key as it was; a computed one answers its caller with
// Result.Err matching ErrValueTooLarge, is counted in Stats().Unstored, and
// is computed again by the next call, as a value over MaxValueBytes is
// with Redis.
func TestLocalEntryOverMaxLocalBytesShare(t *testing.T) {
	c := newCache[[]byte](t, nil, cache.Options{TTL: time.Hour, MaxLocalBytes: 1 << 20})
	ctx := bounded(t, 10*time.Second)
	heavy := make([]byte, 100<<10) // over 1 MiB / 16 = 64 KiB
	if err := c.Set(ctx, "k", []byte("small")); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", heavy); !errors.Is(err, cache.ErrValueTooLarge) {
		t.Fatalf("Set of a 100 KiB value with MaxLocalBytes 1 MiB: %v, want ErrValueTooLarge", err)
	}
	if v, found, err := c.Get(ctx, "k"); err != nil || !found || string(v) != "small" {
		t.Fatalf("after the refused Set: %q found=%v err=%v, want the old value", v, found, err)
	}
	var calls atomic.Int32
	fn := func(context.Context) ([]byte, error) { calls.Add(1); return heavy, nil }
	for i := range 2 {
		r, err := c.Fetch(ctx, "heavy", fn)
		if err != nil || len(r.Value) != len(heavy) || r.Outcome != cache.Miss || !errors.Is(r.Err, cache.ErrValueTooLarge) {
			t.Fatalf("call %d: %d bytes, outcome %v, Err %v, err %v; want the value, Miss, ErrValueTooLarge", i, len(r.Value), r.Outcome, r.Err, err)
		}
	}
	if n, st := calls.Load(), c.Stats(); n != 2 || st.Unstored != 2 {
		t.Fatalf("%d computes, Unstored %d; want 2 and 2", n, st.Unstored)
	}
}

// A value whose Weight panics (a nil pointer's, with a value receiver)
// weighs nothing: process-local mode stores it and answers it again.
func TestLocalWeightOfNilPointer(t *testing.T) {
	c := newCache[*page](t, nil, cache.Options{TTL: time.Hour})
	ctx := bounded(t, 10*time.Second)
	for i, want := range []cache.Outcome{cache.Miss, cache.Hit} {
		r, err := c.Fetch(ctx, "k", func(context.Context) (*page, error) { return nil, nil })
		if err != nil || r.Value != nil || r.Outcome != want {
			t.Fatalf("call %d: %+v %v, want a nil value, %v", i, r, err, want)
		}
	}
	if err := c.Set(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
}

// MaxLocalBytes is validated by New.
func TestMaxLocalBytesValidated(t *testing.T) {
	if _, err := cache.New[string](nil, cache.Options{MaxLocalBytes: -1}); !errors.Is(err, cache.ErrInvalidOptions) {
		t.Fatalf("MaxLocalBytes -1: %v, want ErrInvalidOptions", err)
	}
}

// What a Cache with Redis keeps while Redis is unreachable (the degraded
// values, answering for DegradedTTL) is bounded by MaxLocalBytes too: of 64
// values of 32 KiB computed during an outage with MaxLocalBytes 1 MiB, at
// most 32 answer again without a compute.
func TestDegradedKeptBoundedByMaxLocalBytes(t *testing.T) {
	_, c, _ := outage(t, cache.Options{MaxLocalBytes: 1 << 20, DegradedTTL: time.Hour})
	ctx := bounded(t, 30*time.Second)
	const n, size = 64, 32 << 10
	var calls atomic.Int32
	for i := range n {
		fn := func(context.Context) (string, error) { calls.Add(1); return strings.Repeat("x", size), nil }
		if r, err := c.Fetch(ctx, fmt.Sprint(i), fn); err != nil || r.Outcome != cache.Degraded {
			t.Fatalf("key %d during the outage: outcome %v, err %v", i, r.Outcome, err)
		}
	}
	// Read them back with a failing origin, which keeps nothing: a key
	// answered without a call was kept.
	first, down := calls.Load(), errors.New("origin down")
	for i := range n {
		_, _ = c.Fetch(ctx, fmt.Sprint(i), func(context.Context) (string, error) { calls.Add(1); return "", down })
	}
	kept := n - int(calls.Load()-first)
	if kept > (1<<20)/size || kept == 0 {
		t.Fatalf("%d of %d values of %d bytes answered again from what the outage kept with MaxLocalBytes 1 MiB, want (0, %d]", kept, n, size, (1<<20)/size)
	}
}
