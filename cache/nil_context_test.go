package cache_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Issue 27 (small ones): a nil context is an error, ErrNilContext, from
// every method that takes one, before any work, instead of a panic inside
// singleflight; the helpers for compute functions treat it as a context
// from outside one.
func TestNilContextIsAnError(t *testing.T) {
	for _, mode := range []string{"redis", "local"} {
		t.Run(mode, func(t *testing.T) {
			rdb := redistest.Client(t)
			if mode == "local" {
				rdb = nil
			}
			c := newCache[string](t, rdb, cache.Options{})
			var nilCtx context.Context
			fn := func(context.Context) (string, error) { return "v", nil }
			calls := map[string]func() error{
				"GetOrCompute":      func() error { _, err := c.GetOrCompute(nilCtx, "k", fn); return err },
				"Fetch":             func() error { _, err := c.Fetch(nilCtx, "k", fn); return err },
				"FetchWithFallback": func() error { _, err := c.FetchWithFallback(nilCtx, "k", fn, fn); return err },
				"GetOrComputeMany": func() error {
					_, err := c.GetOrComputeMany(nilCtx, []string{"k"}, func(context.Context, []string) (map[string]string, error) { return nil, nil })
					return err
				},
				"Get":            func() error { _, _, err := c.Get(nilCtx, "k"); return err },
				"Set":            func() error { return c.Set(nilCtx, "k", "v") },
				"Delete":         func() error { return c.Delete(nilCtx, "k") },
				"Expire":         func() error { return c.Expire(nilCtx, "k") },
				"InvalidateTags": func() error { return c.InvalidateTags(nilCtx, "t") },
				"ExpireTags":     func() error { return c.ExpireTags(nilCtx, "t") },
				"Clear":          func() error { return c.Clear(nilCtx) },
				"Ping":           func() error { return c.Ping(nilCtx) },
			}
			for name, call := range calls {
				if err := call(); !errors.Is(err, cache.ErrNilContext) {
					t.Errorf("%s(nil): %v, want ErrNilContext", name, err)
				}
			}
			if err := cache.SetTags(nilCtx, "t"); err == nil {
				t.Error("SetTags(nil): no error")
			}
			if cache.SetTTL(nilCtx, 1) || cache.SetStale(nilCtx, 1, 1) {
				t.Error("SetTTL/SetStale(nil) reported success")
			}
			if _, ok := cache.Previous[string](nilCtx, "k"); ok {
				t.Error("Previous(nil) found a value")
			}
		})
	}
}
