package cache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/fencelua"
	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/stale"
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
	setScript = redis.NewScript(fencelua.Source + setSrc)

	//go:embed scripts/delete.lua
	deleteSrc    string
	deleteScript = redis.NewScript(fencelua.Source + deleteSrc)
)

// entry is a decoded entry, from Redis or from the process-local store.
type entry[V any] struct {
	value    V
	w        stale.Windows
	took     time.Duration // how long its compute took (XFetch's Δ)
	negative bool          // a cached "not found"
}

const flagNegative = 1

// lookup reads key from Redis or from the local store. A missing, corrupt
// or foreign entry is not found (corrupt ones are counted); only Redis
// failures are errors.
//
// Concurrent lookups of one key in a process share one GET: under a hot key
// that turns N round trips into one, and each caller still decodes its own
// copy of the value. Only this first read is shared; the lease paths read on
// their own, so that a read that started before a fill cannot stand in for
// one that must see it.
func (c *Cache[V]) lookup(ctx context.Context, key string) (entry[V], bool, error) {
	if c.rdb == nil {
		e, ok := c.local.get(key, time.Now())
		return e, ok, nil
	}
	r, err := c.reads.do(ctx, key, func(ctx context.Context) (reply, error) {
		return c.get(ctx, c.valueKey(key))
	})
	if err != nil {
		return entry[V]{}, false, err
	}
	return c.decode(ctx, key, r, true)
}

// reply is one GET's answer: the raw envelope, or none.
type reply struct {
	s     string
	found bool
}

// get runs one GET, recording Redis' health for the breaker.
func (c *Cache[V]) get(ctx context.Context, valueKey string) (reply, error) {
	r, err := c.getRaw(ctx, valueKey)
	if err != nil {
		c.redisFailed(ctx, err)
		return r, err
	}
	c.redisOK(ctx)
	return r, nil
}

// getRaw runs one GET.
func (c *Cache[V]) getRaw(ctx context.Context, valueKey string) (reply, error) {
	s, err := c.rdb.Get(ctx, valueKey).Result()
	if errors.Is(err, redis.Nil) {
		return reply{}, nil
	}
	if err != nil {
		return reply{}, fmt.Errorf("cache: read %s: %w", valueKey, err)
	}
	return reply{s: s, found: true}, nil
}

// readRedis reads and decodes one envelope with a GET of its own; count is
// false for re-reads of an entry already counted as corrupt.
func (c *Cache[V]) readRedis(ctx context.Context, k keys, count bool) (entry[V], bool, error) {
	r, err := c.get(ctx, k.value)
	if err != nil {
		return entry[V]{}, false, err
	}
	return c.decode(ctx, k.key, r, count)
}

// readWaiting is readRedis for a waiter: a failure is not the breaker's to
// count (see waitFailed), a success still closes it.
func (c *Cache[V]) readWaiting(ctx context.Context, k keys) (entry[V], bool, error) {
	r, err := c.getRaw(ctx, k.value)
	if err != nil {
		return entry[V]{}, false, err
	}
	c.redisOK(ctx)
	return c.decode(ctx, k.key, r, true)
}

// decode turns a GET's reply into an entry.
func (c *Cache[V]) decode(ctx context.Context, key string, r reply, count bool) (e entry[V], found bool, err error) {
	if !r.found {
		return e, false, nil
	}
	s := r.s
	// A read-only view of the reply, saving a copy per hit: the envelope
	// decoder and Codec.Unmarshal must not modify data or keep it.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	env, err := decodeEnvelope(b)
	if err == nil && env.Flags&flagNegative == 0 {
		if _, raw := c.opts.Codec.(defaultCodec); !raw || !decodeRaw(env.Value, &e.value) {
			var v V // decoded apart from e, so only V escapes to the heap
			err = c.opts.Codec.Unmarshal(env.Value, &v)
			e.value = v
		}
	}
	if err != nil {
		if count {
			c.stats.corrupt.Add(1)
			c.observe(ctx, Event{Kind: EventCorrupt, Key: key, Err: err})
			c.logRare(ctx, slog.LevelWarn, "stampede: corrupt or foreign entry treated as a miss", key, err)
		}
		return entry[V]{}, false, nil
	}
	e.w = stale.Windows{
		Created:    fromMillis(env.Created),
		FreshUntil: fromMillis(env.FreshUntil),
		StaleUntil: fromMillis(env.StaleUntil),
		ErrorUntil: fromMillis(env.ErrorUntil),
	}
	e.took = time.Duration(env.ComputeMicros) * time.Microsecond
	e.negative = env.Flags&flagNegative != 0
	return e, true, nil
}

// redisFailed records a Redis failure for the breaker, unless the caller's
// own context ended it.
func (c *Cache[V]) redisFailed(ctx context.Context, err error) {
	if !c.noteRedisError(ctx, err) {
		return
	}
	if c.brk.failure() {
		c.observe(ctx, Event{Kind: EventBreakerOpen, Err: err})
		c.logRare(ctx, slog.LevelError, "stampede: Redis unreachable, computing locally (breaker open)", "", err)
	}
}

// noteRedisError counts and reports a Redis failure and, on a Cluster,
// has the slot map reloaded; it reports false, doing nothing, when the
// caller's own context ended it.
func (c *Cache[V]) noteRedisError(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	c.stats.redisErrors.Add(1)
	c.observe(ctx, Event{Kind: EventRedisError, Err: err})
	c.reloadTopology()
	return true
}

// reloadTopology asks a Cluster client to reload its slot map after a
// failure: go-redis reloads it on MOVED, not when a dead master refuses
// connections, so without this a process whose only traffic went to that
// master would keep dialling it after its replica took over. Reloads are
// lazy and coalesced by go-redis.
func (c *Cache[V]) reloadTopology() {
	if c.notify.cluster != nil {
		c.notify.cluster.ReloadState(context.Background())
	}
}

// redisOK records a Redis success.
func (c *Cache[V]) redisOK(ctx context.Context) {
	if c.brk.success() {
		c.observe(ctx, Event{Kind: EventBreakerClosed})
		c.logRare(ctx, slog.LevelInfo, "stampede: Redis answers again (breaker closed)", "", nil)
	}
}

// encode turns an entry into an envelope for Redis.
func (c *Cache[V]) encode(e entry[V], fence int64) ([]byte, error) {
	env := envelope{
		Created:       toMillis(e.w.Created),
		FreshUntil:    toMillis(e.w.FreshUntil),
		StaleUntil:    toMillis(e.w.StaleUntil),
		ErrorUntil:    toMillis(e.w.ErrorUntil),
		ComputeMicros: e.took.Microseconds(),
		Fence:         fence,
	}
	if e.negative {
		env.Flags |= flagNegative
	} else {
		b, err := c.opts.Codec.Marshal(&e.value)
		if err != nil {
			return nil, fmt.Errorf("%w: encode: %w", ErrCodec, err)
		}
		if len(b) > c.opts.MaxValueBytes {
			return nil, fmt.Errorf("%w: %d bytes encoded, limit %d (Options.MaxValueBytes)", ErrValueTooLarge, len(b), c.opts.MaxValueBytes)
		}
		env.Value = b
	}
	return encodeEnvelope(&env)
}

// fill writes e under the fence of l and releases l. stored is false when a
// newer lease, Set or Delete fenced the write out, or Redis failed; err is
// set only when the value could not be encoded.
func (c *Cache[V]) fill(ctx context.Context, k keys, l *lease.Lease, e entry[V]) (stored bool, err error) {
	args, err := c.fillArgs(k, l, e)
	if err != nil {
		return false, err
	}
	return c.settle(ctx, k, fillScript.Run(ctx, c.rdb, []string{k.value, k.lease, k.fence}, args...), args), nil
}

// settle reads a fill's reply (see filled); when Redis failed, it retries
// the fill, with the same args, in the background (see refill).
func (c *Cache[V]) settle(ctx context.Context, k keys, cmd *redis.Cmd, args []any) (stored bool) {
	stored = c.filled(ctx, k, cmd)
	if !stored && cmd.Err() != nil && ctx.Err() == nil {
		c.refill(k, args)
	}
	return stored
}

// refill retries a fill that failed on a Redis error (a failover, a
// restart) in the background, with backoff, for up to LeaseTTL+WaitTimeout:
// the replicas waiting for this value get it as soon as Redis answers
// instead of recomputing it. The fence makes a late fill safe: if a newer
// lease, Set or Delete happened meanwhile, it is rejected.
func (c *Cache[V]) refill(k keys, args []any) {
	c.goBackground("\x00fill "+k.key, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, c.opts.LeaseTTL+c.opts.WaitTimeout)
		defer cancel()
		for attempt := 1; sleep(ctx.Done(), backoff(attempt)); attempt++ {
			cmd := fillScript.Run(ctx, c.rdb, []string{k.value, k.lease, k.fence}, args...)
			if cmd.Err() == nil || ctx.Err() != nil {
				if c.filled(ctx, k, cmd) {
					c.stats.refills.Add(1)
				}
				return
			}
			c.reloadTopology()
		}
	})
}

// fillArgs encodes e for the fill script: envelope, TTL, token, fence,
// channel, SPUBLISH flag.
func (c *Cache[V]) fillArgs(k keys, l *lease.Lease, e entry[V]) ([]any, error) {
	b, err := c.encode(e, l.Fence())
	if err != nil {
		return nil, err
	}
	return []any{b, max(e.w.Expire().Milliseconds(), 1), l.Token(), l.Fence(), k.channel, c.shardArg()}, nil
}

// filled reads the fill script's reply, reporting a fence rejection and a
// rejected release; it says whether the value was stored. A Redis failure
// counts, but the value is good: only storing it failed.
func (c *Cache[V]) filled(ctx context.Context, k keys, cmd *redis.Cmd) bool {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("cache: fill: unexpected reply %v", res)
	}
	if err != nil {
		c.redisFailed(ctx, err)
		return false
	}
	if res[0] == 0 {
		c.stats.fencedOut.Add(1)
		c.observe(ctx, Event{Kind: EventFencedOut, Key: k.key})
		c.logRare(ctx, slog.LevelInfo, "stampede: fill rejected by the fence (a newer lease, Set or Delete won)", k.key, nil)
	}
	if res[1] == 0 {
		c.observe(ctx, Event{Kind: EventReleaseRejected, Key: k.key})
	}
	return res[0] == 1
}

// fillNegative caches a "not found" for NegativeTTL. It reports whether the
// fill script ran (and so released the lease).
func (c *Cache[V]) fillNegative(ctx context.Context, k keys, l *lease.Lease) bool {
	if c.opts.NegativeTTL <= 0 {
		return false
	}
	stored, err := c.fill(ctx, k, l, entry[V]{w: c.policy.WriteNegative(time.Now()), negative: true})
	if stored {
		c.stats.negativeStored.Add(1)
	}
	return err == nil && stored
}

// abandon releases l without a value and wakes the waiters.
func (c *Cache[V]) abandon(ctx context.Context, k keys, l *lease.Lease) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	n, err := abandonScript.Run(actx, c.rdb, []string{k.lease}, l.Token(), k.channel, c.shardArg()).Int64()
	switch {
	case err != nil:
		c.redisFailed(actx, err)
	case n == 0:
		c.observe(ctx, Event{Kind: EventReleaseRejected, Key: k.key})
	}
}

// localStore holds entries in memory for a Cache without Redis. Entries past
// their last window are dropped on read and by a periodic sweep.
type localStore[V any] struct {
	mu sync.RWMutex
	m  map[string]entry[V]
}

func newLocalStore[V any]() *localStore[V] {
	return &localStore[V]{m: make(map[string]entry[V])}
}

func (s *localStore[V]) get(key string, now time.Time) (entry[V], bool) {
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	if ok && !now.Before(e.w.ErrorUntil) {
		s.mu.Lock()
		if cur, still := s.m[key]; still && !now.Before(cur.w.ErrorUntil) {
			delete(s.m, key)
		}
		s.mu.Unlock()
		return entry[V]{}, false
	}
	return e, ok
}

func (s *localStore[V]) put(key string, e entry[V]) {
	s.mu.Lock()
	s.m[key] = e
	s.mu.Unlock()
}

func (s *localStore[V]) delete(key string) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

func (s *localStore[V]) sweep(now time.Time) {
	s.mu.Lock()
	for k, e := range s.m {
		if !now.Before(e.w.ErrorUntil) {
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
}

// computeMeta carries what a compute function says about its own result.
type computeMeta struct {
	mu           sync.Mutex
	ttl          time.Duration // 0: the policy's
	stale        time.Duration // < 0: the policy's
	staleIfError time.Duration // < 0: the policy's
}

func newComputeMeta() *computeMeta { return &computeMeta{stale: -1, staleIfError: -1} }

// policy returns p with the compute function's overrides applied.
func (m *computeMeta) policy(p stale.Policy) stale.Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	return p.With(m.ttl, m.stale, m.staleIfError)
}

type metaKey struct{}

var computeMetaKey = &metaKey{}

func metaFrom(ctx context.Context) *computeMeta {
	m, _ := ctx.Value(computeMetaKey).(*computeMeta)
	return m
}

// SetTTL sets the TTL of the value being computed, overriding Options.TTL
// for this entry (an upstream's max-age, say). Call it from within the
// compute function with the context it was given; it reports false, and
// does nothing, for any other context or a TTL under 1ms.
func SetTTL(ctx context.Context, ttl time.Duration) bool {
	m := metaFrom(ctx)
	if m == nil || ttl < time.Millisecond {
		return false
	}
	m.mu.Lock()
	m.ttl = ttl
	m.mu.Unlock()
	return true
}

// SetStale sets the stale-while-revalidate and stale-if-error windows of the
// value being computed, overriding Options.Stale and Options.StaleIfError
// for this entry (an upstream's Cache-Control directives, say). A negative
// duration keeps the option's. Like [SetTTL] it works only inside the
// compute function and reports whether it did.
func SetStale(ctx context.Context, staleFor, staleIfError time.Duration) bool {
	m := metaFrom(ctx)
	if m == nil {
		return false
	}
	m.mu.Lock()
	if staleFor >= 0 {
		m.stale = staleFor
	}
	if staleIfError >= 0 {
		m.staleIfError = staleIfError
	}
	m.mu.Unlock()
	return true
}
