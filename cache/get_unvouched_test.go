package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Get never answers "not found" for a value it could not vouch for: when
// the invalidation marks cannot be read (their reads fail while the value's
// own read succeeds), the value may still be valid, so Get returns an
// error matching ErrUnavailable instead, and finds the value again once
// the marks can be read. (A compute path treats such an entry as expired
// and computes; Get computes nothing.)
func TestGetWithMarksUnreadableIsUnavailableNotNotFound(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			rdb := redis.NewClient(cfg.opts(redistest.Addr(t)))
			t.Cleanup(func() { _ = rdb.Close() })
			unreadable := &failMarkReads{}
			rdb.AddHook(unreadable)
			c := newCache[string](t, rdb, cache.Options{Namespace: redistest.Prefix(t)})
			if err := c.Set(t.Context(), "k", "v", cache.WithTags("t")); err != nil {
				t.Fatal(err)
			}
			unreadable.on.Store(true)
			v, found, err := c.Get(t.Context(), "k")
			if found || !errors.Is(err, cache.ErrUnavailable) {
				t.Fatalf("Get with the marks unreadable: %q, found=%v, %v; want an error matching ErrUnavailable", v, found, err)
			}
			unreadable.on.Store(false)
			if v, found, err := c.Get(t.Context(), "k"); err != nil || !found || v != "v" {
				t.Fatalf("Get once the marks can be read: %q, found=%v, %v", v, found, err)
			}
		})
	}
}

// failMarkReads fails every pipeline of HMGETs (the marks' reads) while on
// is set; other commands pass.
type failMarkReads struct{ on atomic.Bool }

func (*failMarkReads) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*failMarkReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f *failMarkReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f.on.Load() && len(cmds) > 0 && cmds[0].Name() == "hmget" {
			err := errors.New("test: the marks cannot be read")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}
