package cache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// batchOrigin answers any keys with "v:"+key and records each call's keys.
type batchOrigin struct {
	mu    sync.Mutex
	calls [][]string
	per   map[string]int
	omit  map[string]bool
	err   error
}

func (o *batchOrigin) fn(_ context.Context, keys []string) (map[string]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, slices.Sorted(slices.Values(keys)))
	if o.per == nil {
		o.per = map[string]int{}
	}
	if o.err != nil {
		return nil, o.err
	}
	m := map[string]string{}
	for _, k := range keys {
		o.per[k]++
		if !o.omit[k] {
			m[k] = "v:" + k
		}
	}
	return m, nil
}

func TestBatchMixedHitsMissesAndHeldKeys(t *testing.T) {
	caches := replicas[string](t, 2, cache.Options{WaitTimeout: 10 * time.Second})
	ctx := context.Background()
	for _, k := range []string{"hit1", "hit2"} {
		if err := caches[0].Set(ctx, k, "v:"+k); err != nil {
			t.Fatal(err)
		}
	}
	// Another replica is computing "held" right now.
	held := &origin[string]{value: "v:held", started: make(chan struct{}, 1), release: make(chan struct{})}
	go func() { _, _ = caches[1].GetOrCompute(ctx, "held", held.fn) }()
	<-held.started
	o := &batchOrigin{}
	done := make(chan struct{})
	var got map[string]string
	var err error
	go func() {
		defer close(done)
		got, err = caches[0].GetOrComputeMany(ctx, []string{"hit1", "miss1", "held", "hit2", "miss2", "miss1"}, o.fn)
	}()
	waitFor(t, "the batch's compute", func() bool { o.mu.Lock(); defer o.mu.Unlock(); return len(o.calls) == 1 })
	close(held.release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"hit1", "hit2", "miss1", "miss2", "held"} {
		if got[k] != "v:"+k {
			t.Errorf("%s = %q", k, got[k])
		}
	}
	if len(o.calls) != 1 || !slices.Equal(o.calls[0], []string{"miss1", "miss2"}) {
		t.Fatalf("fn calls %v: want one call with the keys this caller won", o.calls)
	}
	if held.calls.Load() != 1 {
		t.Fatalf("held key computed %d times", held.calls.Load())
	}
	// The batch filled its keys.
	for _, k := range []string{"miss1", "miss2"} {
		if v, found, _ := caches[1].Get(ctx, k); !found || v != "v:"+k {
			t.Errorf("%s not stored: %q", k, v)
		}
	}
}

func TestBatchPartialResultsAndErrors(t *testing.T) {
	c := newCache[string](t, redistest.Client(t), cache.Options{})
	ctx := context.Background()
	o := &batchOrigin{omit: map[string]bool{"b": true}}
	got, err := c.GetOrComputeMany(ctx, []string{"a", "b", ""}, o.fn)
	var ke cache.KeyErrors
	if !errors.As(err, &ke) || !errors.Is(ke["b"], cache.ErrMissingFromBatch) || !errors.Is(ke[""], cache.ErrInvalidKey) || len(ke) != 2 {
		t.Fatalf("err=%v", err)
	}
	if got["a"] != "v:a" || len(got) != 1 {
		t.Fatalf("got %v", got)
	}
	// "b" was not left locked: it computes at once now.
	o.omit = nil
	got, err = c.GetOrComputeMany(ctx, []string{"a", "b"}, o.fn)
	if err != nil || got["b"] != "v:b" || !slices.Equal(o.calls[1], []string{"b"}) {
		t.Fatalf("%v %v calls %v", got, err, o.calls)
	}
	// An error from fn is every computed key's error.
	o.err = errors.New("origin down")
	_, err = c.GetOrComputeMany(ctx, []string{"a", "c", "d"}, o.fn)
	if !errors.As(err, &ke) || len(ke) != 2 || !errors.Is(ke["c"], o.err) || !errors.Is(err, o.err) {
		t.Fatalf("err=%v", err)
	}
	if _, err := c.GetOrComputeMany(ctx, []string{"x"}, nil); !errors.Is(err, cache.ErrNilFunc) {
		t.Fatalf("nil fn: %v", err)
	}
	_, err = c.GetOrComputeMany(ctx, []string{"p"}, func(context.Context, []string) (map[string]string, error) { panic("boom") })
	var pe *cache.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("panic: %v", err)
	}
}

// 4 replicas x 20 callers, batches over the same 20 keys: each key is
// computed once in the whole fleet.
func TestBatchStampedeOncePerKey(t *testing.T) {
	caches := replicas[string](t, 4, cache.Options{WaitTimeout: 10 * time.Second})
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	o := &batchOrigin{}
	slow := func(ctx context.Context, ks []string) (map[string]string, error) {
		time.Sleep(20 * time.Millisecond) // the origin's latency
		return o.fn(ctx, ks)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range caches {
		for g := range 20 {
			wg.Go(func() {
				<-start
				ks := slices.Clone(keys)
				rotate := g % len(ks)
				ks = append(ks[rotate:], ks[:rotate]...)
				got, err := c.GetOrComputeMany(context.Background(), ks, slow)
				if err != nil || len(got) != len(keys) {
					t.Errorf("%d values, %v", len(got), err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	for _, k := range keys {
		if o.per[k] != 1 {
			t.Fatalf("key %s computed %d times", k, o.per[k])
		}
	}
}

func TestBatchLocalMode(t *testing.T) {
	c := newCache[string](t, nil, cache.Options{})
	o := &batchOrigin{}
	for range 2 {
		got, err := c.GetOrComputeMany(context.Background(), []string{"a", "b"}, o.fn)
		if err != nil || got["a"] != "v:a" || got["b"] != "v:b" {
			t.Fatalf("%v %v", got, err)
		}
	}
	if len(o.calls) != 1 {
		t.Fatalf("local batch computed %d times", len(o.calls))
	}
}

func TestBatchRedisDownDegrades(t *testing.T) {
	c := newCache[string](t, downClient(t), cache.Options{})
	got, err := c.GetOrComputeMany(context.Background(), []string{"a"}, (&batchOrigin{}).fn)
	if err != nil || got["a"] != "v:a" {
		t.Fatalf("%v %v", got, err)
	}
}
