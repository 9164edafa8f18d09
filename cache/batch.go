package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/stale"
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
// with one call of fn: one read for all keys (MGET, or a pipeline on a
// Cluster), one pipelined lease attempt per missing key, one fn call for the
// keys this caller won (fn is given only those), and waits for the keys
// another replica is computing (fn is then called for such a key alone if
// the wait ends without a value). Each key keeps the stampede guarantee.
//
// The map holds every key that has a value; keys without one are in the
// [KeyErrors] returned (a key fn left out gets [ErrMissingFromBatch]).
// Stale values are returned as they are and refreshed in the background.
func (c *Cache[V]) GetOrComputeMany(ctx context.Context, keys []string, fn func(ctx context.Context, missing []string) (map[string]V, error)) (map[string]V, error) {
	if fn == nil {
		return nil, ErrNilFunc
	}
	out := make(map[string]V, len(keys))
	errs := KeyErrors{}
	var todo []string // may repeat a key: reads do not mind, misses are deduplicated below
	for _, k := range keys {
		if err := c.check(k); err != nil {
			errs[k] = err
			continue
		}
		if c.l1 != nil {
			if e, ok := c.l1.get(k, time.Now()); ok && !e.negative {
				c.stats.l1Hit()
				out[k] = e.value
				continue
			}
		}
		todo = append(todo, k)
	}
	single := func(key string) func(context.Context) (V, error) {
		return func(ctx context.Context) (V, error) {
			m, err := fn(ctx, []string{key})
			v, ok := m[key]
			switch {
			case err != nil:
				return v, err
			case !ok:
				return v, ErrMissingFromBatch
			}
			return v, nil
		}
	}
	// served answers key k from entry e in state s; false means it must be computed.
	served := func(k string, e entry[V], s stale.State) bool {
		switch s {
		case stale.Fresh:
			c.stats.outcome(Hit)
			c.l1put(k, e)
			if !e.negative {
				out[k] = e.value
			} else {
				errs[k] = errCachedNotFound
			}
			return true
		case stale.RefreshEarly, stale.Stale:
			c.stats.outcome(Stale)
			c.refreshAsync(k, e, single(k))
			if !e.negative {
				out[k] = e.value
			}
			return true
		}
		return false
	}
	if len(todo) > 0 {
		var missing []string
		switch {
		case c.rdb == nil:
			now := time.Now()
			for _, k := range todo {
				// A cached not-found is recomputed in local batches.
				if e, ok := c.local.get(k, now); ok && !e.negative && served(k, e, c.policy.State(e.w, now, 0, 0)) {
					continue
				}
				missing = append(missing, k)
			}
		case !c.brk.allow():
			missing = todo
		default:
			now := time.Now()
			var seen map[string]bool
			err := c.readMany(ctx, todo, func(i int, e entry[V], found bool) {
				k := todo[i]
				if found && served(k, e, c.policy.State(e.w, now, e.took, rand.Float64())) {
					return
				}
				if seen == nil {
					seen = map[string]bool{}
				}
				if !seen[k] {
					seen[k] = true
					missing = append(missing, k)
				}
			})
			if err != nil {
				missing = slices.Clone(todo) // Redis is failing: degraded, below
			} else {
				if len(missing) > 0 {
					c.computeMany(ctx, missing, fn, single, out, errs)
					missing = nil
				}
			}
		}
		if len(missing) > 0 { // local mode or degraded: one call, coalesced per key no further
			slices.Sort(missing)
			c.computeLocally(ctx, slices.Compact(missing), fn, out, errs)
		}
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// readMany reads keys in one round trip: MGET where all keys may live on one
// node, a pipeline of GETs on a Cluster.
func (c *Cache[V]) readMany(ctx context.Context, keys []string, each func(i int, e entry[V], found bool)) error {
	// All value keys as slices of one string: one allocation, not one per key.
	var b strings.Builder
	size := 0
	for _, k := range keys {
		size += len(c.opts.Namespace) + len(k) + 5
	}
	b.Grow(size)
	for _, k := range keys {
		b.WriteString("{")
		b.WriteString(c.opts.Namespace)
		b.WriteString(":")
		b.WriteString(k)
		b.WriteString("}:v")
	}
	all := b.String()
	vkeys := make([]string, len(keys))
	at := 0
	for i, k := range keys {
		n := len(c.opts.Namespace) + len(k) + 5
		vkeys[i] = all[at : at+n]
		at += n
	}
	// give hands key i's reply (if any) to each, decoded.
	give := func(i int, s string, ok bool) {
		var e entry[V]
		found := false
		if ok {
			e, found, _ = c.decode(ctx, keys[i], reply{s: s, found: true}, true)
		}
		each(i, e, found)
	}
	fail := func(err error) error {
		c.redisFailed(ctx, err)
		return fmt.Errorf("cache: read %d keys: %w", len(keys), err)
	}
	if _, cluster := c.rdb.(*redis.ClusterClient); !cluster {
		vals, err := c.rdb.MGet(ctx, vkeys...).Result()
		if err != nil {
			return fail(err)
		}
		c.redisOK(ctx)
		for i, v := range vals {
			s, ok := v.(string)
			give(i, s, ok)
		}
		return nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(vkeys))
	for i, vk := range vkeys {
		cmds[i] = pipe.Get(ctx, vk)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fail(err)
	}
	c.redisOK(ctx)
	for i, cmd := range cmds {
		s, err := cmd.Result()
		give(i, s, err == nil)
	}
	return nil
}

// computeMany takes the leases of missing keys, computes the keys it won
// with one fn call and fills them, and waits for the others.
func (c *Cache[V]) computeMany(ctx context.Context, missing []string, fn func(context.Context, []string) (map[string]V, error),
	single func(string) func(context.Context) (V, error), out map[string]V, errs KeyErrors) {
	names := make([]string, len(missing))
	ks := make([]keys, len(missing))
	for i, k := range missing {
		ks[i] = c.keysFor(k)
		names[i] = ks[i].name
	}
	leases, _, lerrs := c.leases.AcquireMany(ctx, names, c.opts.LeaseTTL)
	var won []int
	var others []string
	for i := range missing {
		switch {
		case leases[i] != nil:
			won = append(won, i)
		case lerrs[i] != nil:
			c.redisFailed(ctx, lerrs[i])
			others = append(others, missing[i]) // Fetch degrades or retries it
		default:
			others = append(others, missing[i])
		}
	}
	var mu sync.Mutex // guards out and errs from here on
	var wg sync.WaitGroup
	for _, k := range others {
		wg.Go(func() {
			r, err := c.Fetch(ctx, k, single(k))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[k] = err
			} else {
				out[k] = r.Value
			}
		})
	}
	if len(won) > 0 {
		c.leadMany(ctx, missing, ks, leases, won, fn, &mu, out, errs)
	}
	wg.Wait()
}

// leadMany computes the won keys with one fn call while holding their
// leases, and fills them.
func (c *Cache[V]) leadMany(ctx context.Context, missing []string, ks []keys, leases []*lease.Lease, won []int,
	fn func(context.Context, []string) (map[string]V, error), mu *sync.Mutex, out map[string]V, errs KeyErrors) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ComputeTimeout)
	defer cancel()
	filled := make([]bool, len(missing))
	defer func() {
		for _, i := range won {
			if !filled[i] {
				c.abandon(cctx, ks[i], leases[i])
			}
		}
	}()
	// The previous holders may have filled between our read and our leases.
	var compute []string
	wonKeys := pick(missing, won)
	now := time.Now()
	err := c.readMany(cctx, wonKeys, func(j int, e entry[V], found bool) {
		if found && c.policy.State(e.w, now, 0, 0) == stale.Fresh && !e.negative {
			mu.Lock()
			out[wonKeys[j]] = e.value
			mu.Unlock()
			return
		}
		compute = append(compute, wonKeys[j])
	})
	if err != nil {
		compute = wonKeys
	}
	if len(compute) == 0 {
		return
	}
	var stops []func() error
	for _, i := range won {
		_, stop := leases[i].KeepAlive(cctx)
		stops = append(stops, stop)
	}
	c.stats.computes.Add(1)
	start := time.Now()
	vals, err := callBatch(cctx, fn, compute)
	took := time.Since(start)
	for _, stop := range stops {
		_ = stop()
	}
	if c.opts.Observer != nil {
		c.observe(cctx, Event{Kind: EventCompute, Key: compute[0], Duration: took, Err: err})
	}
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		c.stats.computeErrors.Add(1)
		for _, k := range compute {
			errs[k] = err
		}
		return
	}
	// Fill every computed key in one pipeline (EVAL: a pipeline cannot fall
	// back from EVALSHA on NOSCRIPT).
	now = time.Now()
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(missing))
	args := make([][]any, len(missing))
	entries := make([]entry[V], len(missing))
	for _, i := range won {
		k := missing[i]
		v, ok := vals[k]
		if !ok {
			if _, got := out[k]; !got {
				errs[k] = ErrMissingFromBatch
			}
			continue
		}
		out[k] = v
		entries[i] = entry[V]{value: v, w: c.policy.Write(now, 0, rand.Float64()), took: took}
		var ferr error
		if args[i], ferr = c.fillArgs(ks[i], leases[i], entries[i]); ferr != nil {
			errs[k] = ferr // not stored; the deferred abandon releases the lease
			continue
		}
		cmds[i] = fillScript.Eval(cctx, pipe, []string{ks[i].value, ks[i].lease, ks[i].fence}, args[i]...)
	}
	_, _ = pipe.Exec(cctx) // errors are per command
	for _, i := range won {
		if cmds[i] == nil {
			continue
		}
		filled[i] = true // the script ran or Redis failed: either way nothing is left to release by us
		if c.settle(cctx, ks[i], cmds[i], args[i]) {
			c.l1put(missing[i], entries[i])
		}
	}
}

func pick(keys []string, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = keys[i]
	}
	return out
}

// callBatch runs fn, turning a panic into a *PanicError.
func callBatch[V any](ctx context.Context, fn func(context.Context, []string) (map[string]V, error), keys []string) (m map[string]V, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, keys)
}

// computeLocally serves missing keys without Redis (process-local mode, or
// Redis unreachable): one fn call; in local mode the values are stored.
func (c *Cache[V]) computeLocally(ctx context.Context, missing []string, fn func(context.Context, []string) (map[string]V, error), out map[string]V, errs KeyErrors) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ComputeTimeout)
	defer cancel()
	c.stats.computes.Add(1)
	vals, err := callBatch(cctx, fn, missing)
	now := time.Now()
	for _, k := range missing {
		v, ok := vals[k]
		switch {
		case err != nil:
			errs[k] = err
		case !ok:
			errs[k] = ErrMissingFromBatch
		default:
			out[k] = v
			if c.local != nil {
				c.local.put(k, entry[V]{value: v, w: c.policy.Write(now, 0, rand.Float64())})
			}
			if c.rdb != nil {
				c.stats.outcome(Degraded)
			}
		}
	}
	if err != nil {
		c.stats.computeErrors.Add(1)
	}
}
