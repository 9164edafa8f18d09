package cache

import (
	"context"
)

// refreshAsync recomputes a stale (or early-refreshing) entry seen in the
// background, once per key in the process and, through the claim, once in
// the fleet, through the same lead as a miss. A failed refresh leaves the
// entry as it is; a panic in fn is recovered and counted like any compute's.
func (c *Cache[V]) refreshAsync(key string, seen entry[V], fn batchFunc[V]) {
	c.goBackground(key, func(ctx context.Context) {
		k := c.keysFor(key)
		cl := c.store.claimMany(ctx, []keys{k})[0]
		if !cl.won { // another owner refreshes it, or the store failed (recorded)
			return
		}
		c.stats.refreshes.Add(1)
		_, _ = c.leadOne(ctx, k, cl.claim, fn, nil, seen.w.Created)
	})
}

// goDetached runs work in a goroutine that Close waits for; it reports
// false, running nothing, when the cache is closed.
func (c *Cache[V]) goDetached(work func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		work()
	}()
	return true
}

// goBackground runs work for key in a goroutine unless one already runs for
// key or the cache is closed. Close cancels ctx and waits.
func (c *Cache[V]) goBackground(key string, work func(ctx context.Context)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if _, running := c.refreshing.LoadOrStore(key, struct{}{}); running {
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.refreshing.Delete(key)
		ctx, cancel := context.WithTimeout(c.bgCtx, c.opts.RefreshTimeout)
		defer cancel()
		work(ctx)
	}()
}
