package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

func TestBadInput(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{MaxKeyBytes: 16})
	ctx := context.Background()
	fn := func(context.Context) (string, error) { return "v", nil }
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"empty key", func() error { _, err := c.GetOrCompute(ctx, "", fn); return err }, cache.ErrInvalidKey},
		{"long key", func() error { _, err := c.GetOrCompute(ctx, strings.Repeat("k", 17), fn); return err }, cache.ErrInvalidKey},
		{"nil fn", func() error { _, err := c.GetOrCompute(ctx, "k", nil); return err }, cache.ErrNilFunc},
		{"nil fallback", func() error { _, err := c.FetchWithFallback(ctx, "k", fn, nil); return err }, cache.ErrNilFunc},
		{"Get empty key", func() error { _, _, err := c.Get(ctx, ""); return err }, cache.ErrInvalidKey},
		{"Set empty key", func() error { return c.Set(ctx, "", "v") }, cache.ErrInvalidKey},
		{"Delete empty key", func() error { return c.Delete(ctx, "") }, cache.ErrInvalidKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Fatalf("err=%v, want %v", err, tc.want)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	cases := []struct {
		name string
		opts cache.Options
	}{
		{"negative TTL", cache.Options{TTL: -time.Second}},
		{"sub-ms TTL", cache.Options{TTL: time.Microsecond}},
		{"negative Stale", cache.Options{Stale: -1}},
		{"negative LeaseTTL", cache.Options{LeaseTTL: -1}},
		{"negative ComputeTimeout", cache.Options{ComputeTimeout: -1}},
		{"negative WaitTimeout", cache.Options{WaitTimeout: -1}},
		{"negative PollInterval", cache.Options{PollInterval: -1}},
		{"negative MaxValueBytes", cache.Options{MaxValueBytes: -1}},
		{"huge MaxValueBytes", cache.Options{MaxValueBytes: 1 << 30}},
		{"negative MaxKeyBytes", cache.Options{MaxKeyBytes: -1}},
		{"huge MaxKeyBytes", cache.Options{MaxKeyBytes: 1 << 20}},
		{"negative BreakerThreshold", cache.Options{BreakerThreshold: -1}},
		{"negative BreakerCooldown", cache.Options{BreakerCooldown: -1}},
		{"negative MaxDegradedComputes", cache.Options{MaxDegradedComputes: -1}},
		{"unknown OnBusy", cache.Options{OnBusy: 9}},
		{"huge L1Size", cache.Options{L1Size: 1 << 27}},
		{"negative L1MaxBytes", cache.Options{L1MaxBytes: -1}},
		{"negative L1TTL", cache.Options{L1TTL: -1}},
		{"long Namespace", cache.Options{Namespace: strings.Repeat("n", 300)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := cache.New[int](nil, tc.opts); !errors.Is(err, cache.ErrInvalidOptions) {
				t.Fatalf("err=%v, want ErrInvalidOptions", err)
			}
		})
	}
	c, err := cache.New[int](nil, cache.Options{})
	if err != nil {
		t.Fatalf("zero Options: %v", err)
	}
	_ = c.Close()
}

func TestOversizedValue(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{MaxValueBytes: 64})
	ctx := context.Background()
	big := strings.Repeat("x", 100)
	// A good value is not turned into an error: it answers, Result.Err says
	// why it was not stored, and Stats counts it.
	r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return big, nil })
	if err != nil || !errors.Is(r.Err, cache.ErrValueTooLarge) || r.Value != big || c.Stats().Unstored != 1 {
		t.Fatalf("err=%v Result.Err=%v len(v)=%d unstored=%d: want no error, Result.Err ErrValueTooLarge and the computed value", err, r.Err, len(r.Value), c.Stats().Unstored)
	}
	if err := c.Set(ctx, "k", big); !errors.Is(err, cache.ErrValueTooLarge) {
		t.Fatalf("Set of an oversized value: %v", err)
	}
	if _, found, _ := c.Get(ctx, "k"); found {
		t.Fatal("oversized value was stored")
	}
	// The key is not left locked: the next call computes at once.
	o := &origin[string]{value: "small"}
	if r, err := c.Fetch(ctx, "k", o.fn); err != nil || r.Outcome != cache.Miss || r.Value != "small" {
		t.Fatalf("after oversized: %+v %v", r, err)
	}
	if err := c.Set(ctx, "k2", big); !errors.Is(err, cache.ErrValueTooLarge) {
		t.Fatalf("Set oversized: %v", err)
	}
}

func TestCorruptAndForeignEntriesAreRecomputed(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	c := newCache[map[string]int](t, rdb, cache.Options{Namespace: ns})
	ctx := context.Background()
	entries := map[string][]byte{
		"garbage":  {0xff, 0x00, 0x13, 0x37, 0xde, 0xad},
		"empty":    {},
		"foreign":  []byte(`{"json":"from another app"}`),
		"truncate": {0x9a, 0xcd, 0x53, 0x50, 0x01},
		// A valid envelope header whose value is not a map[string]int.
	}
	other := newCache[string](t, rdb, cache.Options{Namespace: ns})
	if err := other.Set(ctx, "wrongtype", "a string, not a map"); err != nil {
		t.Fatal(err)
	}
	for key, b := range entries {
		if err := rdb.Set(ctx, "{"+ns+":"+key+"}:v", b, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"garbage", "empty", "foreign", "truncate", "wrongtype"}
	for i, key := range keys {
		want := map[string]int{key: i}
		r, err := c.Fetch(ctx, key, func(context.Context) (map[string]int, error) { return want, nil })
		if err != nil || r.Outcome != cache.Miss || r.Value[key] != i {
			t.Fatalf("%s: %+v %v", key, r, err)
		}
		// Overwritten with a good entry.
		r, err = c.Fetch(ctx, key, func(context.Context) (map[string]int, error) { return nil, errors.New("must not run") })
		if err != nil || r.Outcome != cache.Hit || r.Value[key] != i {
			t.Fatalf("%s after overwrite: %+v %v", key, r, err)
		}
	}
	if got := c.Stats().Corrupt; got != uint64(len(keys)) {
		t.Fatalf("Corrupt=%d, want %d", got, len(keys))
	}
}

func TestPanicReachesEveryCallerAndUnlocks(t *testing.T) {
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	c := newCache[int](t, rdb, cache.Options{Namespace: ns})
	release := make(chan struct{})
	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = c.GetOrCompute(context.Background(), "k", func(context.Context) (int, error) {
				<-release
				panic("origin exploded")
			})
		})
	}
	leakcheck.WaitBlocked(t, doFrame, n, 10*time.Second)
	close(release)
	wg.Wait()
	for i, err := range errs {
		var pe *cache.PanicError
		if !errors.As(err, &pe) || pe.Value != "origin exploded" || len(pe.Stack) == 0 {
			t.Fatalf("caller %d: err=%v, want *PanicError with value and stack", i, err)
		}
	}
	leaseKey, _ := lease.Keys(ns + ":k")
	if rdb.Exists(context.Background(), leaseKey).Val() != 0 {
		t.Fatal("the panic left the key locked")
	}
	if _, found, _ := c.Get(context.Background(), "k"); found {
		t.Fatal("a panic stored a value")
	}
	o := &origin[int]{value: 9}
	if r, err := c.Fetch(context.Background(), "k", o.fn); err != nil || r.Outcome != cache.Miss || r.Value != 9 {
		t.Fatalf("after panic: %+v %v", r, err)
	}
}

func TestErrorsAreNotCached(t *testing.T) {
	c := newCache[int](t, redistest.Client(t), cache.Options{})
	ctx := context.Background()
	for _, fnErr := range []error{errors.New("origin down"), context.Canceled, context.DeadlineExceeded} {
		_, err := c.GetOrCompute(ctx, "k", func(context.Context) (int, error) { return 0, fnErr })
		if !errors.Is(err, fnErr) {
			t.Fatalf("err=%v, want %v", err, fnErr)
		}
		if _, found, _ := c.Get(ctx, "k"); found {
			t.Fatalf("error %v was cached", fnErr)
		}
	}
	o := &origin[int]{value: 1}
	if r, err := c.Fetch(ctx, "k", o.fn); err != nil || r.Outcome != cache.Miss {
		t.Fatalf("after errors: %+v %v", r, err)
	}
}

func TestClosed(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			var c *cache.Cache[int]
			var err error
			if mode == "redis" {
				c, err = cache.New[int](redistest.Client(t), cache.Options{Namespace: redistest.Prefix(t)})
			} else {
				c, err = cache.New[int](nil, cache.Options{})
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := c.GetOrCompute(context.Background(), "k", func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, cache.ErrClosed) {
				t.Fatalf("after Close: %v", err)
			}
		})
	}
}

// Hostile keys: huge ones get a clear error; braces, colons and binary
// bytes keep distinct entries (the hash tag is the whole {ns:key} prefix).
func TestHostileKeys(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{})
	ctx := context.Background()
	if _, err := c.GetOrCompute(ctx, strings.Repeat("k", 10<<20), func(context.Context) (string, error) { return "", nil }); !errors.Is(err, cache.ErrInvalidKey) {
		t.Fatalf("10 MB key: %v", err)
	}
	keys := []string{"a}b", "{x}", "}", "{", "a:b", "a", "\x00\xff\xfe", "a}:v", "日本"}
	for i, k := range keys {
		if err := c.Set(ctx, k, fmt.Sprint("v", i)); err != nil {
			t.Fatalf("Set %q: %v", k, err)
		}
	}
	for i, k := range keys {
		v, found, err := c.Get(ctx, k)
		if err != nil || !found || v != fmt.Sprint("v", i) {
			t.Fatalf("Get %q: %q %v %v", k, v, found, err)
		}
		r, err := c.Fetch(ctx, k, func(context.Context) (string, error) { return "", errors.New("must not run") })
		if err != nil || r.Outcome != cache.Hit {
			t.Fatalf("Fetch %q: %+v %v", k, r, err)
		}
	}
}
