package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A value whose invalidation marks cannot be vouched for is no previous
// value for a revalidation: after InvalidateTags returned on one replica,
// another replica that meets the tag for the first time while its marks
// reads fail cannot tell whether its entry was invalidated, so it
// recomputes; that compute must not be handed the entry as Previous, or an
// ErrUnchanged (the origin's 304 to the invalidated value's ETag) stores
// the invalidated value again under a claim newer than the invalidation,
// valid for the whole fleet.
func TestRevalidationWithMarksUnreadableSeesNoPrevious(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, StaleIfError: time.Hour}
	a := newCache[string](t, redistest.Client(t), opts)
	if err := a.Set(t.Context(), "k", "old", cache.WithTags("t")); err != nil {
		t.Fatal(err)
	}
	if err := a.InvalidateTags(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	unreadable := &failMarkReads{}
	unreadable.on.Store(true)
	rdb.AddHook(unreadable)
	b := newCache[string](t, rdb, opts)
	var sawPrevious atomic.Bool
	r, err := b.Fetch(bounded(t, 20*time.Second), "k", func(ctx context.Context) (string, error) {
		if v, ok := cache.Previous[string](ctx, "k"); ok {
			sawPrevious.Store(true)
			if v == "old" {
				return "", cache.ErrUnchanged // the origin's 304 to the old ETag
			}
		}
		return "rebuilt", nil
	})
	if err != nil && !errors.Is(err, cache.ErrUnavailable) {
		t.Fatalf("Fetch: %v", err)
	}
	if r.Value == "old" || sawPrevious.Load() {
		t.Fatalf("the recompute was handed the value invalidated before it (previous seen: %v) and answered %q (%v)", sawPrevious.Load(), r.Value, r.Outcome)
	}
	unreadable.on.Store(false)
	got, err := a.Fetch(bounded(t, 10*time.Second), "k", func(context.Context) (string, error) { return "fresh", nil })
	if err != nil || got.Value == "old" {
		t.Fatalf("after: %+v %v; the invalidated value came back", got, err)
	}
}
