package cache_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

type withChan struct {
	ID int
	C  chan int
}

type withFunc struct {
	ID int
	F  func()
}

type withSkippedChan struct {
	ID int
	C  chan int `msgpack:"-"`
}

type withAny struct {
	ID int
	X  any
}

// Issue 14, defect 10 (New): with a Redis client, New fails with
// ErrInvalidOptions when the codec cannot encode V (a chan or func field, a
// chan V), instead of making every call a silent miss. A type the codec can
// encode (the chan field skipped by a tag) is accepted.
func TestNewRejectsUnencodableType(t *testing.T) {
	rdb := redistest.Client(t)
	ns := redistest.Prefix(t)
	check := func(name string, err error, closer interface{ Close() error }) {
		t.Helper()
		if closer != nil {
			_ = closer.Close()
		}
		if !errors.Is(err, cache.ErrInvalidOptions) {
			t.Errorf("New[%s]: err %v, want ErrInvalidOptions", name, err)
		}
	}
	c1, err := cache.New[withChan](rdb, cache.Options{Namespace: ns})
	check("struct with a chan field", err, nilIfNil(c1))
	c2, err := cache.New[withFunc](rdb, cache.Options{Namespace: ns})
	check("struct with a func field", err, nilIfNil(c2))
	c3, err := cache.New[chan int](rdb, cache.Options{Namespace: ns})
	check("chan int", err, nilIfNil(c3))

	ok, err := cache.New[withSkippedChan](rdb, cache.Options{Namespace: ns})
	if err != nil {
		t.Fatalf("New of a type whose chan field the codec skips: %v", err)
	}
	_ = ok.Close()
}

// nilIfNil keeps a nil *Cache from becoming a non-nil interface.
func nilIfNil[V any](c *cache.Cache[V]) interface{ Close() error } {
	if c == nil {
		return nil
	}
	return c
}

// Issue 14, defect 10 (too large, unencodable value): a computed value that
// cannot be stored is returned as a good value: GetOrCompute with a nil
// error, Fetch with a nil error and Result.Err matching ErrValueTooLarge,
// GetOrComputeMany with no KeyErrors entry; Stats().Unstored counts each,
// the Logger gets a line. Set of a too-large value still fails with
// ErrValueTooLarge. A value the codec fails on at run time (an interface
// field holding a chan) is counted the same way.
func TestUnstoredValueIsVisibleNotAnError(t *testing.T) {
	log := &lineLog{}
	big := strings.Repeat("x", 100)
	c := newCache[string](t, redistest.Client(t), cache.Options{TTL: time.Hour, MaxValueBytes: 16, Logger: slog.New(log)})
	ctx := bounded(t, 10*time.Second)

	o := &origin[string]{value: big}
	if v, err := c.GetOrCompute(ctx, "a", o.fn); err != nil || v != big {
		t.Fatalf("GetOrCompute of a too-large value: %d bytes, err %v; want the value and no error", len(v), err)
	}
	r, err := c.Fetch(ctx, "b", o.fn)
	if err != nil || r.Value != big || !errors.Is(r.Err, cache.ErrValueTooLarge) {
		t.Fatalf("Fetch of a too-large value: %d bytes, err %v, Result.Err %v; want the value, no error, Result.Err ErrValueTooLarge", len(r.Value), err, r.Err)
	}
	got, err := c.GetOrComputeMany(ctx, []string{"c", "d"}, func(_ context.Context, ks []string) (map[string]string, error) {
		return map[string]string{"c": big, "d": big}, nil
	})
	if err != nil || got["c"] != big || got["d"] != big {
		t.Fatalf("GetOrComputeMany of too-large values: %d keys, err %v; want both values and no error", len(got), err)
	}
	if n := c.Stats().Unstored; n != 4 {
		t.Fatalf("Unstored %d, want 4 (a, b, c, d)", n)
	}
	if len(log.all()) == 0 {
		t.Fatal("nothing logged for values computed but not stored")
	}
	if err := c.Set(ctx, "e", big); !errors.Is(err, cache.ErrValueTooLarge) {
		t.Fatalf("Set of a too-large value: %v, want ErrValueTooLarge", err)
	}
	if n := c.Stats().Unstored; n != 4 {
		t.Fatalf("a failed Set counted as Unstored: %d", n)
	}
	// A small value on the same cache is stored as usual.
	small := &origin[string]{value: "ok"}
	if _, err := c.GetOrCompute(ctx, "f", small.fn); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Fetch(ctx, "f", small.fn); err != nil || r.Outcome != cache.Hit || small.calls.Load() != 1 {
		t.Fatalf("a small value: %+v, %v, %d computes", r, err, small.calls.Load())
	}

	t.Run("codec failure", func(t *testing.T) {
		log := &lineLog{}
		c := newCache[withAny](t, redistest.Client(t), cache.Options{TTL: time.Hour, Logger: slog.New(log)})
		ch := make(chan int)
		v, err := c.GetOrCompute(bounded(t, 10*time.Second), "k", func(context.Context) (withAny, error) {
			return withAny{ID: 7, X: ch}, nil
		})
		if err != nil || v.ID != 7 {
			t.Fatalf("GetOrCompute of a value the codec cannot encode: %+v, %v; want the value and no error", v, err)
		}
		if n := c.Stats().Unstored; n != 1 {
			t.Fatalf("Unstored %d, want 1", n)
		}
		if len(log.all()) == 0 {
			t.Fatal("nothing logged for a value the codec could not encode")
		}
	})
}
