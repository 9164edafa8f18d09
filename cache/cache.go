package cache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/singleflight"
)

var (
	//go:embed scripts/fill.lua
	fillSrc    string
	fillScript = redis.NewScript(fillSrc)

	//go:embed scripts/abandon.lua
	abandonSrc    string
	abandonScript = redis.NewScript(abandonSrc)

	//go:embed scripts/set.lua
	setSrc    string
	setScript = redis.NewScript(setSrc)

	//go:embed scripts/delete.lua
	deleteSrc    string
	deleteScript = redis.NewScript(deleteSrc)
)

// Cache is a typed cache that computes each missing or expired key once per
// fleet. Create it with [New]; it is safe for concurrent use. Call
// [Cache.Close] to stop its background work; it does not close the Redis
// client.
type Cache[V any] struct {
	rdb    redis.UniversalClient // nil: process-local
	opts   Options
	leases *lease.Client
	notify *notifier
	local  *localStore[V]
	sf     singleflight.Group[loaded[V]]
	brk    breaker
	sem    *semaphore.Weighted
	stats  counters

	refreshing sync.Map // key -> struct{}: background refreshes in flight
	bgCtx      context.Context
	bgCancel   context.CancelFunc
	bg         sync.WaitGroup

	sweepDone chan struct{} // closed when the local sweeper stops

	mu         sync.Mutex // guards closed against bg.Add
	closed     bool
	closedFlag atomic.Bool // closed, for the hot path
	once       sync.Once
}

// loaded is what one shared load hands to every caller waiting on it.
type loaded[V any] struct {
	value   V
	outcome Outcome
	created time.Time
}

const (
	maxNamespaceBytes = 256
	maxKeyBytesLimit  = lease.MaxNameBytes - maxNamespaceBytes - 1
)

// New returns a Cache storing values of type V in rdb. A nil rdb makes a
// process-local cache: in-memory entries and in-process coalescing, no lease.
// A standalone, Sentinel (failover) or Cluster client all work.
func New[V any](rdb redis.UniversalClient, opts Options) (*Cache[V], error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if len(opts.Namespace) > maxNamespaceBytes {
		return nil, fmt.Errorf("%w: Namespace longer than %d bytes", ErrInvalidOptions, maxNamespaceBytes)
	}
	if opts.MaxKeyBytes > maxKeyBytesLimit {
		return nil, fmt.Errorf("%w: MaxKeyBytes above %d", ErrInvalidOptions, maxKeyBytesLimit)
	}
	if isNilClient(rdb) {
		rdb = nil
	}
	c := &Cache[V]{rdb: rdb, opts: opts}
	c.brk = breaker{threshold: int32(opts.BreakerThreshold), cooldown: opts.BreakerCooldown}
	if opts.MaxDegradedComputes > 0 {
		c.sem = semaphore.NewWeighted(int64(opts.MaxDegradedComputes))
	}
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	if rdb == nil {
		c.local = newLocalStore[V]()
		c.startSweeper()
		return c, nil
	}
	interval := max(opts.LeaseTTL/3, time.Millisecond)
	leases, err := lease.New(rdb, lease.Options{
		ExtendInterval: interval,
		MaxExtensions:  int(opts.ComputeTimeout/interval) + 2,
		FenceTTL:       max(24*time.Hour, 4*(opts.TTL+opts.Stale+opts.LeaseTTL)),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	c.leases = leases
	c.notify = newNotifier(rdb)
	return c, nil
}

func isNilClient(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return r == nil
	case *redis.ClusterClient:
		return r == nil
	case *redis.Ring:
		return r == nil
	}
	return false
}

// Namespace returns the cache's namespace (after defaults).
func (c *Cache[V]) Namespace() string { return c.opts.Namespace }

// GetOrCompute returns the value for key, computing it with fn when it is
// missing or expired: once for all concurrent callers in the process and,
// through the Redis lease, once for the whole fleet. fn's error is returned
// and never cached.
func (c *Cache[V]) GetOrCompute(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	r, err := c.Fetch(ctx, key, fn)
	return r.Value, err
}

// Fetch is [Cache.GetOrCompute] and also says how the call was answered.
//
// When fn fails with [ErrValueTooLarge]-style storage errors, the computed
// value is still returned in the Result with the error.
func (c *Cache[V]) Fetch(ctx context.Context, key string, fn func(context.Context) (V, error)) (Result[V], error) {
	return c.fetch(ctx, key, fn, nil)
}

// FetchWithFallback is [Cache.Fetch], except that when another replica keeps
// computing key past WaitTimeout, fallback answers (Outcome [Fallback]);
// its result is not stored. When callers in one process share a call, the
// fallback of the caller that started it is used.
func (c *Cache[V]) FetchWithFallback(ctx context.Context, key string, fn, fallback func(context.Context) (V, error)) (Result[V], error) {
	if fallback == nil {
		return Result[V]{}, fmt.Errorf("%w: fallback", ErrNilFunc)
	}
	return c.fetch(ctx, key, fn, fallback)
}

func (c *Cache[V]) check(key string) error {
	if c.isClosed() {
		return ErrClosed
	}
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > c.opts.MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes, limit %d (Options.MaxKeyBytes)", ErrInvalidKey, len(key), c.opts.MaxKeyBytes)
	}
	return nil
}

func (c *Cache[V]) isClosed() bool { return c.closedFlag.Load() }

func (c *Cache[V]) fetch(ctx context.Context, key string, fn, fallback func(context.Context) (V, error)) (Result[V], error) {
	if err := c.check(key); err != nil {
		return Result[V]{}, err
	}
	if fn == nil {
		return Result[V]{}, ErrNilFunc
	}
	if c.rdb == nil {
		return c.fetchLocal(ctx, key, fn)
	}
	if c.brk.allow() {
		// The hit path: one GET and a decode, no coalescing, no lease.
		e, v, found, err := c.read(ctx, c.valueKey(key))
		if err == nil {
			if found {
				now := time.Now()
				if now.Before(fromMillis(e.FreshUntil)) {
					return c.result(v, Hit, fromMillis(e.Created)), nil
				}
				if now.Before(fromMillis(e.StaleUntil)) {
					c.refreshAsync(key, c.keysFor(key), fn)
					return c.result(v, Stale, fromMillis(e.Created)), nil
				}
			}
			return c.coalesce(ctx, key, func(sctx context.Context) (loaded[V], error) {
				return c.load(sctx, c.keysFor(key), fn, fallback)
			})
		}
		if ctx.Err() != nil {
			return Result[V]{}, err
		}
	}
	return c.coalesce(ctx, key, func(sctx context.Context) (loaded[V], error) {
		return c.computeDegraded(sctx, fn)
	})
}

// coalesce runs load once for all concurrent callers of key in the process.
func (c *Cache[V]) coalesce(ctx context.Context, key string, load func(context.Context) (loaded[V], error)) (Result[V], error) {
	led := false
	r, _, err := c.sf.Do(ctx, key, func(sctx context.Context) (loaded[V], error) {
		led = true
		return load(sctx)
	})
	if r.outcome == 0 { // this caller's wait ended early, or the load failed before an outcome
		return Result[V]{}, err
	}
	o := r.outcome
	if !led && o == Miss {
		o = Shared
	}
	return c.result(r.value, o, r.created), err
}

func (c *Cache[V]) result(v V, o Outcome, created time.Time) Result[V] {
	c.stats.outcome(o)
	age := time.Duration(0)
	if !created.IsZero() {
		age = max(time.Since(created), 0)
	}
	return Result[V]{Value: v, Outcome: o, Age: age}
}

// read fetches and decodes key's envelope. A missing, corrupt or foreign
// entry is reported as not found (corrupt ones are counted); only Redis
// failures are errors.
func (c *Cache[V]) read(ctx context.Context, valueKey string) (e envelope, v V, found bool, err error) {
	return c.readCounting(ctx, valueKey, true)
}

// readCounting is read; count is false for re-reads of an entry already
// counted as corrupt.
func (c *Cache[V]) readCounting(ctx context.Context, valueKey string, count bool) (e envelope, v V, found bool, err error) {
	b, err := c.rdb.Get(ctx, valueKey).Bytes()
	if errors.Is(err, redis.Nil) {
		c.brk.success()
		return e, v, false, nil
	}
	if err != nil {
		c.redisFailed(ctx, err)
		return e, v, false, fmt.Errorf("cache: read %s: %w", valueKey, err)
	}
	c.brk.success()
	e, err = decodeEnvelope(b)
	if err == nil {
		err = c.opts.Codec.Unmarshal(e.Value, &v)
	}
	if err != nil {
		if count {
			c.stats.corrupt.Add(1)
		}
		var zero V
		return e, zero, false, nil
	}
	return e, v, true, nil
}

// redisFailed records a Redis failure, unless the caller's own context
// ended it.
func (c *Cache[V]) redisFailed(ctx context.Context, err error) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	c.stats.redisErrors.Add(1)
	c.brk.failure()
}

// load runs once per process for a missing or expired key: take the lease
// and compute, or wait for the replica that holds it.
func (c *Cache[V]) load(ctx context.Context, k keys, fn, fallback func(context.Context) (V, error)) (loaded[V], error) {
	l, err := c.leases.Acquire(ctx, k.name, c.opts.LeaseTTL)
	if err == nil {
		return c.lead(ctx, k, l, fn)
	}
	var busy *lease.BusyError
	if errors.As(err, &busy) {
		return c.wait(ctx, k, fn, fallback, busy.Remaining)
	}
	c.redisFailed(ctx, err)
	return c.computeDegraded(ctx, fn)
}

// lead computes the value while holding the lease and fills it.
func (c *Cache[V]) lead(ctx context.Context, k keys, l *lease.Lease, fn func(context.Context) (V, error)) (res loaded[V], err error) {
	filled := false
	defer func() {
		if !filled { // fn failed, panicked or called runtime.Goexit: do not leave the key locked
			c.abandon(ctx, k, l)
		}
	}()
	// The previous holder may have filled between our read and our acquisition.
	e, v, found, err := c.readCounting(ctx, k.value, false)
	if err != nil {
		return c.computeDegraded(ctx, fn)
	}
	if found && time.Now().Before(fromMillis(e.FreshUntil)) {
		return loaded[V]{value: v, outcome: Hit, created: fromMillis(e.Created)}, nil
	}
	_, stop := l.KeepAlive(ctx)
	defer stop() // also on runtime.Goexit in fn
	v, took, err := c.compute(ctx, fn)
	_ = stop() // a lost lease does not matter here: the fence decides the fill
	if err != nil {
		return loaded[V]{}, err
	}
	created := time.Now()
	stored, err := c.fill(ctx, k, l, v, took, created)
	filled = err == nil || stored
	if err != nil {
		return loaded[V]{value: v, outcome: Miss, created: created}, err
	}
	return loaded[V]{value: v, outcome: Miss, created: created}, nil
}

// compute runs fn bounded by ComputeTimeout, turning a panic into a
// *PanicError.
func (c *Cache[V]) compute(ctx context.Context, fn func(context.Context) (V, error)) (v V, took time.Duration, err error) {
	cctx, cancel := context.WithTimeout(ctx, c.opts.ComputeTimeout)
	defer cancel()
	c.stats.computes.Add(1)
	start := time.Now()
	defer func() {
		took = time.Since(start)
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
		if err != nil {
			c.stats.computeErrors.Add(1)
		}
	}()
	v, err = fn(cctx)
	return v, took, err
}

// encode turns v into an envelope for Redis.
func (c *Cache[V]) encode(v V, took time.Duration, fence int64, now time.Time) ([]byte, error) {
	b, err := c.opts.Codec.Marshal(&v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrCodec, err)
	}
	if len(b) > c.opts.MaxValueBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d (Options.MaxValueBytes)", ErrValueTooLarge, len(b), c.opts.MaxValueBytes)
	}
	fresh := now.Add(c.opts.TTL)
	return encodeEnvelope(&envelope{
		Created:       toMillis(now),
		FreshUntil:    toMillis(fresh),
		StaleUntil:    toMillis(fresh.Add(c.opts.Stale)),
		ComputeMicros: took.Microseconds(),
		Fence:         fence,
		Value:         b,
	})
}

func (c *Cache[V]) valueTTL() int64 { return (c.opts.TTL + c.opts.Stale).Milliseconds() }

// fill writes v under the fence of l and releases l. stored is false when a
// newer lease, Set or Delete fenced the write out.
func (c *Cache[V]) fill(ctx context.Context, k keys, l *lease.Lease, v V, took time.Duration, now time.Time) (stored bool, err error) {
	b, err := c.encode(v, took, l.Fence(), now)
	if err != nil {
		return false, err
	}
	n, err := fillScript.Run(ctx, c.rdb, []string{k.value, k.lease, k.fence},
		b, c.valueTTL(), l.Token(), l.Fence(), k.channel).Int64()
	if err != nil {
		c.redisFailed(ctx, err)
		// The value is good; only storing it failed. Callers get it.
		return false, nil
	}
	if n == 0 {
		c.stats.fencedOut.Add(1)
	}
	return n == 1, nil
}

// abandon releases l without a value and wakes the waiters.
func (c *Cache[V]) abandon(ctx context.Context, k keys, l *lease.Lease) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := abandonScript.Run(actx, c.rdb, []string{k.lease}, l.Token(), k.channel).Err(); err != nil {
		c.redisFailed(actx, err)
	}
}

// wait waits for the replica holding the lease to fill the key, taking the
// lease over if the holder dies, until WaitTimeout.
func (c *Cache[V]) wait(ctx context.Context, k keys, fn, fallback func(context.Context) (V, error), remaining time.Duration) (loaded[V], error) {
	wctx, cancel := context.WithTimeout(ctx, c.opts.WaitTimeout)
	defer cancel()
	// Subscribe before re-reading, so that a fill between the two cannot be
	// missed. If subscribing fails, polling still finds the value.
	w, _ := c.notify.subscribe(wctx, k.channel)
	defer w.close()
	for attempt := 0; ; attempt++ {
		e, v, found, err := c.read(ctx, k.value)
		if err != nil {
			return c.computeDegraded(ctx, fn)
		}
		if found {
			now := time.Now()
			if now.Before(fromMillis(e.FreshUntil)) {
				return loaded[V]{value: v, outcome: Waited, created: fromMillis(e.Created)}, nil
			}
			if now.Before(fromMillis(e.StaleUntil)) {
				return loaded[V]{value: v, outcome: Stale, created: fromMillis(e.Created)}, nil
			}
		}
		if attempt > 0 {
			// Still nothing: the holder may have died or given up.
			l, err := c.leases.Acquire(ctx, k.name, c.opts.LeaseTTL)
			if err == nil {
				return c.lead(ctx, k, l, fn)
			}
			var busy *lease.BusyError
			if !errors.As(err, &busy) {
				c.redisFailed(ctx, err)
				return c.computeDegraded(ctx, fn)
			}
			remaining = busy.Remaining
		}
		t := time.NewTimer(c.pollDelay(attempt, remaining))
		select {
		case <-w.C:
		case <-t.C:
		case <-wctx.Done():
			t.Stop()
			return c.busy(ctx, fn, fallback)
		}
		t.Stop()
	}
}

// pollDelay is the safety-net poll interval: capped exponential with jitter,
// and no later than just after the holder's lease would run out.
func (c *Cache[V]) pollDelay(attempt int, remaining time.Duration) time.Duration {
	maxD := c.opts.PollInterval
	d := max(maxD/16, time.Millisecond)
	for range min(attempt, 16) {
		d *= 2
	}
	d = min(d, maxD)
	d = d/2 + rand.N(d/2+1)
	if remaining > 0 {
		d = min(d, remaining+time.Millisecond)
	}
	return d
}

// busy applies the contention policy after WaitTimeout.
func (c *Cache[V]) busy(ctx context.Context, fn, fallback func(context.Context) (V, error)) (loaded[V], error) {
	if fallback != nil {
		v, _, err := c.compute(ctx, fallback)
		return loaded[V]{value: v, outcome: Fallback, created: time.Now()}, err
	}
	if c.opts.OnBusy == BusyError {
		return loaded[V]{}, ErrLeaseBusy
	}
	v, _, err := c.compute(ctx, fn)
	return loaded[V]{value: v, outcome: Miss, created: time.Now()}, err
}

// computeDegraded computes without Redis, bounded by MaxDegradedComputes.
func (c *Cache[V]) computeDegraded(ctx context.Context, fn func(context.Context) (V, error)) (loaded[V], error) {
	if c.sem != nil {
		if err := c.sem.Acquire(ctx, 1); err != nil {
			return loaded[V]{}, err
		}
		defer c.sem.Release(1)
	}
	v, _, err := c.compute(ctx, fn)
	return loaded[V]{value: v, outcome: Degraded, created: time.Now()}, err
}

// refreshAsync recomputes a stale key in the background, once per key in
// the process and, through the lease, once in the fleet.
func (c *Cache[V]) refreshAsync(key string, k keys, fn func(context.Context) (V, error)) {
	c.goBackground(key, func(ctx context.Context) {
		l, err := c.leases.Acquire(ctx, k.name, c.opts.LeaseTTL)
		if err != nil {
			if !errors.Is(err, lease.ErrLeaseBusy) {
				c.redisFailed(ctx, err)
			}
			return
		}
		c.stats.refreshes.Add(1)
		_, _ = c.lead(ctx, k, l, fn)
	})
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
		defer func() { _ = recover() }() // compute recovers fn's panics; this guards the rest
		work(c.bgCtx)
	}()
}

// Get returns the value for key when it is fresh or within its stale window.
// found is false when there is none (or the entry is corrupt).
func (c *Cache[V]) Get(ctx context.Context, key string) (v V, found bool, err error) {
	if err := c.check(key); err != nil {
		return v, false, err
	}
	now := time.Now()
	if c.rdb == nil {
		e, ok := c.local.get(key, now)
		if !ok {
			return v, false, nil
		}
		return e.value, true, nil
	}
	e, v, found, err := c.read(ctx, c.valueKey(key))
	if err != nil || !found || !now.Before(fromMillis(e.StaleUntil)) {
		var zero V
		return zero, false, err
	}
	return v, true, nil
}

// Set stores v for key, fresh for TTL. A compute in flight for key cannot
// overwrite it: its fill is fenced out.
func (c *Cache[V]) Set(ctx context.Context, key string, v V) error {
	if err := c.check(key); err != nil {
		return err
	}
	now := time.Now()
	if c.rdb == nil {
		fresh := now.Add(c.opts.TTL)
		c.local.put(key, localEntry[V]{value: v, created: now, freshUntil: fresh, staleUntil: fresh.Add(c.opts.Stale)})
		return nil
	}
	b, err := c.encode(v, 0, 0, now)
	if err != nil {
		return err
	}
	k := c.keysFor(key)
	err = setScript.Run(ctx, c.rdb, []string{k.value, k.fence}, b, c.valueTTL(), c.fenceTTL(), k.channel).Err()
	if err != nil {
		c.redisFailed(ctx, err)
		return fmt.Errorf("cache: set %s: %w", k.value, err)
	}
	return nil
}

func (c *Cache[V]) fenceTTL() int64 {
	return max(24*time.Hour, 4*(c.opts.TTL+c.opts.Stale+c.opts.LeaseTTL)).Milliseconds()
}

// Delete removes key. A compute in flight for key cannot write its result
// afterwards: its fill is fenced out.
func (c *Cache[V]) Delete(ctx context.Context, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	if c.rdb == nil {
		c.local.delete(key)
		return nil
	}
	k := c.keysFor(key)
	if err := deleteScript.Run(ctx, c.rdb, []string{k.value, k.fence}, c.fenceTTL(), k.channel).Err(); err != nil {
		c.redisFailed(ctx, err)
		return fmt.Errorf("cache: delete %s: %w", k.value, err)
	}
	return nil
}

// Close stops background refreshes (cancelling their context and waiting
// for them) and the notification subscription. Later calls return
// [ErrClosed]. It does not close the Redis client.
func (c *Cache[V]) Close() error {
	var err error
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.closedFlag.Store(true)
		c.mu.Unlock()
		c.bgCancel()
		c.bg.Wait()
		if c.notify != nil {
			err = c.notify.close()
		}
		if c.sweepDone != nil {
			<-c.sweepDone
		}
	})
	return err
}
