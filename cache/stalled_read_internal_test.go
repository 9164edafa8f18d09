package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/redisstore"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A Get that starts after this replica heard a key's invalidation does not
// join a GET of that key sent before: that GET's reply, held up on its way
// back (a loaded machine), may predate the write announced, and the joiner
// would return it, and put it in L1 at a version past the invalidation's
// floor. TestL1CoherenceAfterFills/cluster met this under CPU load, the
// announcement reaching the replica late over the cluster bus.
func TestReadAfterInvalidationDoesNotJoinOlderGET(t *testing.T) {
	ns := redistest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := New[string](redistest.Client(t), Options{Namespace: ns, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	b, err := New[string](redistest.Client(t), Options{Namespace: ns, TTL: time.Hour, L1Size: 10, L1TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if err := w.Set(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	for !L1Tracked(b, "k") { // B hears k's writes
		if ctx.Err() != nil {
			t.Fatal("B never subscribed")
		}
		time.Sleep(time.Millisecond)
	}

	// B's first GET is answered by Redis, then held up until release.
	answered, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	b.redis.p.WrapGet(func(get redisstore.GetFunc) redisstore.GetFunc {
		return func(ctx context.Context, key string) (reply, error) {
			r, err := get(ctx, key)
			if held.CompareAndSwap(false, true) {
				close(answered)
				<-release
			}
			return r, err
		}
	})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	type got struct {
		v   string
		err error
	}
	read := func() <-chan got {
		ch := make(chan got, 1)
		go func() { v, _, err := b.Get(ctx, "k"); ch <- got{v, err} }()
		return ch
	}
	early := read()
	<-answered // Redis answered v1; the reply is on its way

	floor := b.l1.floor("k").Load()
	if err := w.Set(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	for b.l1.floor("k").Load() == floor { // B heard the invalidation
		if ctx.Err() != nil {
			t.Fatal("B never heard the invalidation")
		}
		time.Sleep(time.Millisecond)
	}

	late := read()
	select {
	case r := <-late:
		if r.err != nil || r.v != "v2" {
			t.Fatalf("a Get started after the invalidation: %q %v, want v2", r.v, r.err)
		}
	case <-time.After(5 * time.Second):
		unblock()
		r := <-late
		t.Fatalf("a Get started after the invalidation joined the GET sent before it: %q %v", r.v, r.err)
	}
	unblock()
	if r := <-early; r.err != nil || r.v != "v1" {
		t.Fatalf("the Get that started first: %q %v, want v1", r.v, r.err)
	}
	if v, _, err := b.Get(ctx, "k"); err != nil || v != "v2" {
		t.Fatalf("B afterwards: %q %v, want v2 (the early reply must not stay in L1)", v, err)
	}
}
