package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// KeyErrors holds the keys of a [Cache.GetOrComputeMany] that got no value,
// with why. It matches each of its errors with errors.Is and errors.As.
type KeyErrors map[string]error

// Error lists the failed keys.
func (e KeyErrors) Error() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "cache: %d key(s) without a value:", len(keys))
	for i, k := range keys {
		if i == 5 {
			fmt.Fprintf(&b, " ... (%d more)", len(keys)-5)
			break
		}
		fmt.Fprintf(&b, " %q: %v;", k, e[k])
	}
	return b.String()
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (e KeyErrors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, err := range e {
		out = append(out, err)
	}
	return out
}

// ErrMissingFromBatch is the error of a key that a GetOrComputeMany compute
// function left out of its result. Nothing is cached for it.
var ErrMissingFromBatch = errors.New("cache: key missing from the batch compute's result")

// GetOrComputeMany returns the values of keys, computing the missing ones
// with one call of fn. Each key goes through the same steps as
// [Cache.GetOrCompute] (freshness, stale serving and refresh, the claim,
// waiting for another replica, stale-if-error, the fence), with the round
// trips shared: one read for all keys (MGET, or a pipeline on a Cluster),
// one pipelined claim attempt for the missing ones, one fn call for the
// keys this caller won (fn is given only those), one pipelined fill. Keys
// another replica is computing are waited for (fn is then called for such
// a key alone if the wait ends without a value). [SetTTL] and [SetStale]
// inside fn apply to every key of that call.
//
// The map holds every key that has a value; keys without one are in the
// [KeyErrors] returned (a key fn left out gets [ErrMissingFromBatch]). ctx
// bounds the call: when it ends, the keys without a value yet get its
// error, and the computes already started go on in the background and fill.
func (c *Cache[V]) GetOrComputeMany(ctx context.Context, keys []string, fn func(ctx context.Context, missing []string) (map[string]V, error)) (map[string]V, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if fn == nil {
		return nil, ErrNilFunc
	}
	b := &batch[V]{out: make(map[string]V, len(keys)), errs: KeyErrors{}}
	var version uint64
	if c.l1 != nil {
		version = c.l1.version()
	}
	var todo []string // may repeat a key: reads do not mind, misses are deduplicated in many
	for _, k := range keys {
		if err := c.check(k); err != nil {
			b.errs[k] = err
			continue
		}
		if c.l1 != nil {
			now := c.now()
			if e, ok := c.l1get(ctx, k, now); ok && !e.negative {
				c.stats.l1Hit()
				b.out[k] = e.value
				if c.l1Early(e, now) {
					c.refreshAsync(k, e, fn)
				}
				continue
			}
		}
		todo = append(todo, k)
	}
	switch {
	case len(todo) == 0:
	case ctx.Err() != nil:
		b.giveUp(todo, context.Cause(ctx))
	case ctx.Done() == nil: // never cancelled: nothing to bound, no goroutine to pay for
		c.many(ctx, todo, version, fn, b)
	default:
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.many(ctx, todo, version, fn, b)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			b.giveUp(todo, context.Cause(ctx))
		}
	}
	return b.result()
}

// batch collects a GetOrComputeMany's answers; once the caller gave up, no
// more are taken.
type batch[V any] struct {
	mu     sync.Mutex
	out    map[string]V
	errs   KeyErrors
	closed bool
	// refused are the keys whose load's answer the invalidation fence
	// refused (see Cache.deliver): to be loaded again.
	refused []string
}

// give returns the recorder of key's answer.
func (b *batch[V]) give(key string) func(Result[V], error) {
	return func(r Result[V], err error) { b.record(key, r, err) }
}

// record records key's answer.
func (b *batch[V]) record(key string, r Result[V], err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if err != nil {
		b.errs[key] = err
	} else {
		b.out[key] = r.Value
	}
}

// refuse notes that key's answer was refused by the invalidation fence.
func (b *batch[V]) refuse(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.refused = append(b.refused, key)
	}
}

// takeRefused returns the keys refused since the last call.
func (b *batch[V]) takeRefused() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := b.refused
	b.refused = nil
	return keys
}

// giveUp answers every key still without an answer with err, and takes no
// more answers.
func (b *batch[V]) giveUp(keys []string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, k := range keys {
		_, ok := b.out[k]
		if _, failed := b.errs[k]; !ok && !failed {
			b.errs[k] = err
		}
	}
}

func (b *batch[V]) result() (map[string]V, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if len(b.errs) > 0 {
		return b.out, b.errs
	}
	return b.out, nil
}

// many runs the per-key steps for todo (valid keys, perhaps repeated) with
// shared round trips. Its Redis steps and computes are detached from ctx's
// cancellation (a claim taken must end in a fill or an abandon); ctx bounds
// the waits, and no claim is taken once ctx has ended. The keys whose
// answer the invalidation fence refused when it reached the caller (see
// deliver) go through the steps again, up to maxRecomputes times, then get
// [ErrInvalidated].
func (c *Cache[V]) many(ctx context.Context, todo []string, version uint64, fn batchFunc[V], b *batch[V]) {
	for attempt := 0; ; attempt++ {
		c.manyAttempt(ctx, todo, version, fn, b)
		if todo = b.takeRefused(); len(todo) == 0 || ctx.Err() != nil {
			return
		}
		if attempt == maxRecomputes {
			for _, k := range todo {
				b.record(k, Result[V]{}, fmt.Errorf("%w: %q", ErrInvalidated, k))
			}
			return
		}
		c.stats.recomputed.Add(uint64(len(todo)))
	}
}

// deliver hands key's load answer l to the batch's caller if it passes the
// invalidation fence (servable); otherwise it notes key as refused.
func (c *Cache[V]) deliver(ctx context.Context, b *batch[V], key string, l loaded[V], err error, version uint64) {
	if !c.servable(ctx, l, err) {
		b.refuse(key)
		return
	}
	if l.cacheable(err) {
		c.l1put(key, l.entry(), version)
	}
	b.give(key)(c.answer(ctx, key, l, err))
}

// manyAttempt is one pass of many's steps over todo.
func (c *Cache[V]) manyAttempt(ctx context.Context, todo []string, version uint64, fn batchFunc[V], b *batch[V]) {
	dctx := context.WithoutCancel(ctx)
	ks := c.keysForMany(todo)
	prevs := make([]*entry[V], len(ks))

	if !c.store.available() {
		c.degradedMany(dctx, ctx, ks, prevs, distinct(ks), fn, b)
		return
	}
	var missing []int
	var seen map[string]bool // the keys in missing, once one is
	now := c.now()
	err := c.store.readMany(dctx, ks, readShared, func(i int, e entry[V], found bool) {
		key := ks[i].Key
		switch v, _ := c.judge(dctx, &e, found, now); v {
		case verdictHit:
			c.l1put(key, e, version)
			b.give(key)(c.hit(ctx, key, &e, e.value, now, false))
		case verdictEarly:
			c.l1put(key, e, version)
			c.refreshAsync(key, e, fn)
			b.give(key)(c.answer(ctx, key, e.loaded(Hit), nil))
		case verdictStale:
			c.refreshAsync(key, e, fn)
			b.give(key)(c.answer(ctx, key, e.loaded(Stale), nil))
		case verdictFailSafe:
			b.give(key)(c.answer(ctx, key, e.loaded(Stale), nil))
		case verdictExpired:
			expired := e
			prevs[i] = &expired
			missing = appendOnce(missing, &seen, ks, i)
		default:
			missing = appendOnce(missing, &seen, ks, i)
		}
	})
	if err != nil {
		if ctx.Err() == nil {
			c.degradedMany(dctx, ctx, ks, prevs, distinct(ks), fn, b)
		}
		return
	}
	if len(missing) == 0 || ctx.Err() != nil {
		return
	}
	mk := make([]keys, len(missing))
	for j, i := range missing {
		mk[j] = ks[i]
	}
	var tasks []*task[V]
	var failed []int
	var wg sync.WaitGroup
	for j, cl := range c.store.claimMany(dctx, mk) {
		i := missing[j]
		switch {
		case cl.won:
			tasks = append(tasks, &task[V]{k: ks[i], claim: cl.claim, prev: prevs[i]})
		case cl.err == nil: // another owner computes it: wait, as GetOrCompute would
			k, prev, lost := ks[i], prevs[i], cl
			wg.Go(func() {
				b.give(k.Key)(c.coalesce(ctx, k.Key, version, func(sctx context.Context) (loaded[V], error) {
					return c.wait(sctx, k, fn, nil, prev, lost)
				}))
			})
		default:
			failed = append(failed, i)
		}
	}
	if len(failed) > 0 {
		c.degradedMany(dctx, ctx, ks, prevs, failed, fn, b)
	}
	if len(tasks) > 0 {
		c.lead(dctx, tasks, fn)
		for _, t := range tasks {
			c.deliver(ctx, b, t.k.Key, t.res, t.err, version)
		}
	}
	wg.Wait()
}

// distinct returns the index of each key of ks once.
func distinct(ks []keys) []int {
	var idx []int
	var seen map[string]bool
	for i := range ks {
		idx = appendOnce(idx, &seen, ks, i)
	}
	return idx
}

// appendOnce appends i to missing unless key ks[i] is in it already.
func appendOnce(missing []int, seen *map[string]bool, ks []keys, i int) []int {
	if *seen == nil {
		*seen = make(map[string]bool)
	}
	if (*seen)[ks[i].Key] {
		return missing
	}
	(*seen)[ks[i].Key] = true
	return append(missing, i)
}

// degradedMany computes the keys ks[idx] with one fn call without the store
// (Redis is unreachable), bounded by MaxDegradedComputes.
func (c *Cache[V]) degradedMany(dctx, ctx context.Context, ks []keys, prevs []*entry[V], idx []int, fn batchFunc[V], b *batch[V]) {
	now := c.now()
	var names []string
	var todo []int
	for _, i := range idx {
		key := ks[i].Key
		if e, fresh, ok := c.keptEntry(key, now); ok {
			if fresh {
				b.give(key)(c.answer(ctx, key, e.loaded(Degraded), nil))
				continue
			}
			if prevs[i] == nil {
				prevs[i] = &e
			}
		}
		names, todo = append(names, key), append(todo, i)
	}
	if len(todo) == 0 {
		return
	}
	r, floor, err := c.computeDegraded(dctx, names, fn)
	now = c.now()
	for _, i := range todo {
		key := ks[i].Key
		if err != nil {
			b.record(key, Result[V]{}, err)
			continue
		}
		l, lerr := c.degradedFor(ctx, key, r, prevs[i], floor)
		c.keep(key, l, lerr, prevs[i], now, floor)
		c.deliver(ctx, b, key, l, lerr, 0) // never cacheable: no L1 version needed
	}
}
