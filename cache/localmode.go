package cache

import (
	"context"
	"time"
)

// fetchLocal is Fetch for a Cache without Redis.
func (c *Cache[V]) fetchLocal(ctx context.Context, key string, fn func(context.Context) (V, error)) (Result[V], error) {
	now := time.Now()
	if e, ok := c.local.get(key, now); ok {
		if now.Before(e.freshUntil) {
			return c.result(e.value, Hit, e.created), nil
		}
		c.goBackground(key, func(ctx context.Context) {
			c.stats.refreshes.Add(1)
			_, _ = c.computeLocal(ctx, key, fn)
		})
		return c.result(e.value, Stale, e.created), nil
	}
	return c.coalesce(ctx, key, func(sctx context.Context) (loaded[V], error) {
		// Another caller may have stored it between our read and now.
		if e, ok := c.local.get(key, time.Now()); ok && time.Now().Before(e.freshUntil) {
			return loaded[V]{value: e.value, outcome: Hit, created: e.created}, nil
		}
		return c.computeLocal(sctx, key, fn)
	})
}

func (c *Cache[V]) computeLocal(ctx context.Context, key string, fn func(context.Context) (V, error)) (loaded[V], error) {
	v, _, err := c.compute(ctx, fn)
	if err != nil {
		return loaded[V]{}, err
	}
	now := time.Now()
	fresh := now.Add(c.opts.TTL)
	c.local.put(key, localEntry[V]{value: v, created: now, freshUntil: fresh, staleUntil: fresh.Add(c.opts.Stale)})
	return loaded[V]{value: v, outcome: Miss, created: now}, nil
}

// startSweeper drops expired local entries periodically until Close.
func (c *Cache[V]) startSweeper() {
	every := min(max(c.opts.TTL+c.opts.Stale, time.Second), time.Minute)
	c.sweepDone = make(chan struct{})
	go func() {
		defer close(c.sweepDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				c.local.sweep(now)
			case <-c.bgCtx.Done():
				return
			}
		}
	}()
}
