package cache_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

type plain struct {
	N  int
	S  string
	At time.Time
	A  [2]float64
}

type withSlice struct {
	N  int
	Bs []byte
}

// TestL1OnByDefaultForShareableValues pins L1's default: on for value
// types no caller can change through (strings, numbers, structs and arrays
// of them, time.Time), off for types that refer to memory (a []byte, a
// struct with a slice) unless L1Size turns it on, and off for every type
// with a negative L1Size.
func TestL1OnByDefaultForShareableValues(t *testing.T) {
	rdb := redistest.Client(t)
	for _, c := range []struct {
		what string
		size int
		want int
	}{
		{"string, default", cache.L1Size(newCacheAsConfigured[string](t, rdb, cache.Options{})), 10_000},
		{"plain struct, default", cache.L1Size(newCacheAsConfigured[plain](t, rdb, cache.Options{})), 10_000},
		{"string, L1Size -1", cache.L1Size(newCacheAsConfigured[string](t, rdb, cache.Options{L1Size: -1})), 0},
		{"[]byte, default", cache.L1Size(newCacheAsConfigured[[]byte](t, rdb, cache.Options{})), 0},
		{"struct with a slice, default", cache.L1Size(newCacheAsConfigured[withSlice](t, rdb, cache.Options{})), 0},
		{"[]byte, L1Size 10", cache.L1Size(newCacheAsConfigured[[]byte](t, rdb, cache.Options{L1Size: 10})), 10},
		{"process-local string, default", cache.L1Size(newCacheAsConfigured[string](t, nil, cache.Options{})), 0},
	} {
		if c.size != c.want {
			t.Errorf("%s: L1 holds up to %d entries, want %d", c.what, c.size, c.want)
		}
	}
	// And the default L1 serves: a struct's hits come from it.
	c := newCacheAsConfigured[plain](t, rdb, cache.Options{})
	v := plain{N: 1, S: "s", At: time.Unix(1, 0).UTC(), A: [2]float64{1, 2}}
	waitForL1(t, c, "k", v)
	// An L1 entry answers only while the invalidation marks are vouched
	// for; on a starved machine a read may find them not yet and go to
	// Redis, so the reads repeat until one is an L1 hit.
	fn := func(context.Context) (plain, error) { return plain{}, nil }
	waitFor(t, "a read answered from L1", func() bool {
		before := c.Stats().L1Hits
		r, err := c.Fetch(context.Background(), "k", fn)
		same := r.Value.N == v.N && r.Value.S == v.S && r.Value.At.Equal(v.At) && r.Value.A == v.A // a decoded time.Time may carry another Location
		if err != nil || r.Outcome != cache.Hit || !same {
			t.Fatalf("a default cache's read: %+v, %v; want v", r, err)
		}
		return c.Stats().L1Hits == before+1
	})
}

// TestL1IsBoundedByBytes pins L1MaxBytes: 1,000 values of 1 KiB each never
// hold more than the bound, and a value over a sixteenth of it is not held.
func TestL1IsBoundedByBytes(t *testing.T) {
	const bound = 64 << 10
	c := newCacheAsConfigured[string](t, redistest.Client(t), cache.Options{L1MaxBytes: bound})
	ctx := context.Background()
	waitForL1(t, c, "warm", "warm")
	value := strings.Repeat("x", 1024)
	for i := range 1000 {
		if i < 128 { // twice the bound's worth goes into L1 (each tracked first)
			trackForL1(t, c, fmt.Sprint("k", i))
		}
		if _, err := c.GetOrCompute(ctx, fmt.Sprint("k", i), func(context.Context) (string, error) { return value, nil }); err != nil {
			t.Fatal(err)
		}
		if n := c.Stats().L1Entries; n > bound/1024 {
			t.Fatalf("after %d values of 1 KiB L1 holds %d of them, over its bound of %d bytes", i+1, n, bound)
		}
	}
	if c.Stats().L1Entries == 0 {
		t.Fatal("L1 holds nothing")
	}
	big := strings.Repeat("y", bound/16)
	bigFn := func(context.Context) (string, error) { return big, nil }
	trackForL1(t, c, "big")
	if _, err := c.GetOrCompute(ctx, "big", bigFn); err != nil {
		t.Fatal(err)
	}
	for range 3 { // neither the fill nor a read puts it
		before := c.Stats().L1Hits
		if r, err := c.Fetch(ctx, "big", bigFn); err != nil || r.Value != big || r.Outcome != cache.Hit {
			t.Fatalf("%v %v", r.Outcome, err)
		}
		if c.Stats().L1Hits != before {
			t.Fatal("a value over a sixteenth of L1MaxBytes is held: an L1 hit")
		}
	}
}
