package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/singleflight"
	"github.com/stampede-go/stampede/stale"
)

// Cache is a typed cache that computes each missing or expired key once per
// fleet. Create it with [New]; it is safe for concurrent use. Call
// [Cache.Close] to stop its background work; it does not close the Redis
// client.
type Cache[V any] struct {
	rdb    redis.UniversalClient // nil: process-local
	opts   Options
	policy stale.Policy
	leases *lease.Client
	notify *notifier
	local  *localStore[V]
	l1     *l1[V]      // nil when off
	synced atomic.Bool // L1 may be filled: the invalidation channel is subscribed
	id     string      // this instance, to skip its own invalidations
	sf     singleflight.Group[loaded[V]]
	reads  readGroup // shares concurrent hit-path GETs of one key
	brk    breaker
	sem    *semaphore.Weighted
	stats  counters

	refreshing sync.Map // key -> struct{}: background refreshes in flight
	bgCtx      context.Context
	bgCancel   context.CancelFunc
	bg         sync.WaitGroup
	sweepDone  chan struct{} // closed when the local sweeper stops

	mu         sync.Mutex // guards closed against bg.Add
	closed     bool
	closedFlag atomic.Bool // closed, for the hot path
	once       sync.Once
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
	policy := opts.policy()
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if isNilClient(rdb) {
		rdb = nil
	}
	c := &Cache[V]{rdb: rdb, opts: opts, policy: policy}
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
		MaxExtensions:  int(max(opts.ComputeTimeout, opts.RefreshTimeout)/interval) + 2,
		FenceTTL:       time.Duration(c.fenceTTL()) * time.Millisecond,
		OnExtend:       c.onExtend,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	c.leases = leases
	c.notify = newNotifier(rdb)
	if opts.L1Size > 0 {
		c.l1 = newL1[V](opts.L1Size, opts.L1TTL)
		c.id = strconv.FormatUint(rand.Uint64(), 36)
		c.notify.onReset = func() {
			c.synced.Store(false)
			c.l1.clears.Add(1)
			c.l1.clear()
		}
		c.notify.onListening = func() {
			if !c.synced.Swap(true) {
				c.l1.clear() // what was put while unsubscribed cannot be vouched for
			}
		}
		// Subscribe in the background: New does not wait on Redis. L1 fills
		// only once Redis confirms the subscription (synced), and if Redis is
		// down go-redis subscribes when it is back.
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			_ = c.notify.listen(c.bgCtx, c.invalidationChannel(), c.invalidated)
		}()
	}
	return c, nil
}

// l1put stores e in L1 when L1 is on and in sync with the invalidations.
func (c *Cache[V]) l1put(key string, e entry[V]) {
	if c.l1 != nil && c.synced.Load() {
		c.l1.put(key, e, time.Now())
	}
}

// invalidationChannel carries Set and Delete of any key of the namespace,
// for the L1 tiers of every replica.
func (c *Cache[V]) invalidationChannel() string {
	return "stampede:{" + c.opts.Namespace + "}:invalidate"
}

// invalidated applies another replica's invalidation ("id key") to L1.
func (c *Cache[V]) invalidated(payload string) {
	id, key, ok := strings.Cut(payload, " ")
	if !ok || id == c.id {
		return
	}
	c.l1.delete(key)
}

// onExtend reports the lease's extensions while computing.
func (c *Cache[V]) onExtend(l *lease.Lease, err error) {
	key := strings.TrimPrefix(l.Name(), c.opts.Namespace+":")
	ctx := context.Background()
	switch {
	case err == nil:
		c.observe(ctx, Event{Kind: EventLeaseExtended, Key: key})
	case errors.Is(err, lease.ErrLeaseLost):
		c.observe(ctx, Event{Kind: EventLeaseLost, Key: key, Err: err})
		c.logRare(ctx, slog.LevelWarn, "stampede: lease lost while computing; the fence decides whether the value is stored", key, err)
	default:
		c.redisFailed(ctx, err)
	}
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

// Policy returns the freshness policy the cache applies.
func (c *Cache[V]) Policy() stale.Policy { return c.policy }

// GetOrCompute returns the value for key, computing it with fn when it is
// missing or expired: once for all concurrent callers in the process and,
// through the Redis lease, once for the whole fleet. fn's error is returned
// and never cached, except an error wrapping [ErrNotFound], which is cached
// for NegativeTTL. When fn fails and a value inside its StaleIfError window
// exists, that value is returned without error (use [Cache.Fetch] to see the
// error).
func (c *Cache[V]) GetOrCompute(ctx context.Context, key string, fn func(context.Context) (V, error)) (V, error) {
	r, err := c.Fetch(ctx, key, fn)
	return r.Value, err
}

// Fetch is [Cache.GetOrCompute] and also says how the call was answered.
// When storing the computed value fails (e.g. [ErrValueTooLarge]), the
// value is still returned in the Result, with the error.
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
	if c.closedFlag.Load() {
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

// Get returns the value for key when it is fresh or within its stale window.
// found is false when there is none, when a "not found" is cached, or when
// the entry is corrupt.
func (c *Cache[V]) Get(ctx context.Context, key string) (v V, found bool, err error) {
	if err := c.check(key); err != nil {
		return v, false, err
	}
	if c.l1 != nil {
		if e, ok := c.l1.get(key, time.Now()); ok && !e.negative {
			c.stats.l1Hits.add()
			return e.value, true, nil
		}
	}
	e, found, err := c.lookup(ctx, key)
	if err != nil || !found || e.negative {
		return v, false, err
	}
	switch c.policy.State(e.w, time.Now(), 0, 0) {
	case stale.Fresh:
		c.l1put(key, e)
		return e.value, true, nil
	case stale.Stale:
		return e.value, true, nil
	}
	return v, false, nil
}

// Set stores v for key, fresh for TTL. A compute in flight for key cannot
// overwrite it: its fill is fenced out.
func (c *Cache[V]) Set(ctx context.Context, key string, v V) error {
	if err := c.check(key); err != nil {
		return err
	}
	w := c.policy.Write(time.Now(), 0, rand.Float64())
	if c.rdb == nil {
		c.local.put(key, entry[V]{value: v, w: w})
		return nil
	}
	b, err := c.encode(entry[V]{value: v, w: w}, 0)
	if err != nil {
		return err
	}
	k := c.keysFor(key)
	err = setScript.Run(ctx, c.rdb, []string{k.value, k.fence}, b, w.Expire().Milliseconds(), c.fenceTTL(), k.channel,
		c.invalidationChannel(), c.id+" "+key, c.shardArg()).Err()
	if err != nil {
		c.redisFailed(ctx, err)
		if c.l1 != nil {
			c.l1.delete(key)
		}
		return fmt.Errorf("cache: set %s: %w", k.value, err)
	}
	c.l1put(key, entry[V]{value: v, w: w})
	return nil
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
	if c.l1 != nil {
		c.l1.delete(key)
	}
	k := c.keysFor(key)
	if err := deleteScript.Run(ctx, c.rdb, []string{k.value, k.fence}, c.fenceTTL(), k.channel,
		c.invalidationChannel(), c.id+" "+key, c.shardArg()).Err(); err != nil {
		c.redisFailed(ctx, err)
		return fmt.Errorf("cache: delete %s: %w", k.value, err)
	}
	return nil
}

func (c *Cache[V]) fenceTTL() int64 {
	keep := c.opts.TTL + max(c.opts.Stale, c.opts.StaleIfError) + c.opts.LeaseTTL
	return max(24*time.Hour, 4*keep).Milliseconds()
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

// startSweeper drops expired local entries periodically until Close.
func (c *Cache[V]) startSweeper() {
	every := min(max(c.opts.TTL+max(c.opts.Stale, c.opts.StaleIfError), time.Second), time.Minute)
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
