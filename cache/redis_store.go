package cache

// The Redis store as the seam sees it: a thin adapter over
// internal/redisstore, which runs the protocol's steps in bytes. It encodes
// and decodes the entries around them (entry_codec.go) and keeps what is
// cache's: Redis' health as the breaker, Stats, the Observer and the log
// see it, and the hooks through which the steps report it.

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/redisstore"
	"github.com/stampede-go/stampede/stale"
)

// redisStore is the [store] over Redis: see internal/redisstore for the
// protocol (v2) and its steps.
type redisStore[V any] struct {
	c *Cache[V]
	p *redisstore.Store
	// shared is the last envelope a shared read decoded for the callers
	// sharing its GET, and seen the address of the last one decoded (see
	// sharedEntry).
	shared atomic.Pointer[decodedReply[V]]
	seen   atomic.Uintptr
}

// decodedReply is a shared read's reply decoded, its value aside: env, the
// reply itself (held here, so no other reply can share its bytes), e,
// everything decodeHeader got from it, and raw, the value's encoding (a
// slice of env).
type decodedReply[V any] struct {
	env string
	e   entry[V]
	raw []byte
}

var _ store[struct{}] = (*redisStore[struct{}])(nil)

// reply is one GET's answer: the raw envelope, or none.
type reply = redisstore.Reply

func newRedisStore[V any](c *Cache[V], rdb redis.UniversalClient) (*redisStore[V], error) {
	s := &redisStore[V]{c: c}
	o := c.opts
	s.p = redisstore.New(rdb, redisstore.Config{
		Namespace:           o.Namespace,
		InvalidationChannel: c.invalidationChannel(),
		RedisTimeout:        o.RedisTimeout,
		WaitTimeout:         o.WaitTimeout,
		LeaseTTL:            o.LeaseTTL,
		KeepFor:             max(o.ComputeTimeout, o.RefreshTimeout),
		ErrRedisTimeout:     ErrRedisTimeout,
		ErrClosed:           ErrClosed,
		Marks:               c.marks,
	}, redisstore.Hooks{
		Failed: s.redisFailed,
		Noted:  func(ctx context.Context, err error) { s.noteRedisError(ctx, err) },
		OK:     s.redisOK,
		Rejected: func(ctx context.Context, key string) {
			c.observe(ctx, Event{Kind: EventReleaseRejected, Key: key})
		},
		Extended: func(ctx context.Context, key string) {
			c.observe(ctx, Event{Kind: EventLeaseExtended, Key: key})
		},
		LeaseLost: s.leaseLost,
		Refilled: func(key string) {
			c.stats.refills.Add(1)
			if c.l1 != nil {
				c.l1.invalidate(key) // the announcement skips this replica
			}
		},
		FencedOut: c.fencedOut,
		Spawn:     c.goBackground,
		Log:       c.logRare,
	})
	c.brk.Probe = func() { c.goBackground("\x00probe", s.probe) }
	return s, nil
}

// storeModes is each readMode as the Redis store names it.
var storeModes = [...]redisstore.Mode{readShared: redisstore.Shared, readOwn: redisstore.Own, readWaiting: redisstore.Waiting}

// probe is the breaker's half-open probe: one PING, within
// max(probeTimeout, RedisTimeout), however long Redis stays silent meanwhile
// (a Redis slower than the budget answers it, and the budget learns its
// round trip); a refused dial ends it at once.
func (s *redisStore[V]) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(redisstore.ProbeTimeout, s.p.Budget().Timeout()))
	defer cancel()
	if err := s.p.PingWait(ctx); err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.noteRedisError(context.Background(), err)
		}
		s.c.brk.ProbeFailed()
		return
	}
	s.redisOK(ctx)
}

func (s *redisStore[V]) available() bool { return s.c.brk.Allow() }

// availableWait implements [store]: the call that ends the cooldown waits
// up to one budget for the probe's verdict.
func (s *redisStore[V]) availableWait(ctx context.Context) bool {
	return s.c.brk.AllowWait(ctx, s.p.Budget().Step())
}

func (s *redisStore[V]) close() error { return s.p.Close() }

// read implements [store]: the envelope read (see redisstore.Store.Read),
// decoded. A shared read needs only k.key (see hitKeys).
func (s *redisStore[V]) read(ctx context.Context, k keys, mode readMode) (entry[V], bool, error) {
	if mode == readShared {
		var own entry[V]
		e, v, _, err := s.readHit(ctx, k.Key, &own)
		if e == nil || err != nil {
			return entry[V]{}, false, err
		}
		own = *e // e may be the callers' shared decode: copy it, value aside
		own.value = v
		return own, true, nil
	}
	r, err := s.p.Read(ctx, k, storeModes[mode])
	if err != nil {
		return entry[V]{}, false, err
	}
	return s.c.decodeEntry(ctx, k.Key, r, mode != readOwn)
}

// readHit is the hit path's read (read's shared one) for fetch, in as few
// frames as it can, and with no entry copied: e is everything decoded but
// the value, nil when the key was not found, and v the caller's own copy
// of the value. e is either own, decoded into, or the decode shared by the
// callers of the same GET (see sharedEntry), which nobody may modify.
// Issue 26: a caller resumes from its wait for the GET on a stack that is
// cold in the CPU's caches, and every frame it returns through, and every
// line of an entry copied from frame to frame (three copies of 224 bytes
// before), costs a miss. at is the GET's reading of time.Now, the same for
// all its callers and later than each one's start (see
// redisstore.Store.ReadShared).
func (s *redisStore[V]) readHit(ctx context.Context, key string, own *entry[V]) (e *entry[V], v V, at time.Time, err error) {
	r, at, err := s.p.ReadShared(ctx, key)
	if err != nil || !r.Found {
		return nil, v, at, err
	}
	e, v = s.sharedEntry(ctx, key, r, own)
	return e, v, at, nil
}

// sharedEntry decodes a shared read's reply r: the callers that share one
// GET get the same reply (the same bytes), so the second to decode it
// keeps what it decoded, and the others decode only their own copy of the
// value (issue 26: the envelope's decode and checks, per hit, were a tenth
// of the hit path's time). A reply read by one caller alone (no GET shared)
// costs no allocation for it: it is decoded into own. seen, the address of
// the last reply decoded, only tells a second caller of the same reply
// (or, the address reused, of another: then a decode is kept for
// nothing). The entry returned (own, or the shared decode; nil when the
// reply does not decode) is readHit's.
func (s *redisStore[V]) sharedEntry(ctx context.Context, key string, r reply, own *entry[V]) (e *entry[V], v V) {
	d := s.shared.Load()
	if d == nil || unsafe.StringData(d.env) != unsafe.StringData(r.Envelope) || len(d.env) != len(r.Envelope) {
		at := uintptr(unsafe.Pointer(unsafe.StringData(r.Envelope)))
		if s.seen.Swap(at) != at {
			if !s.c.decodeInto(ctx, key, r.Envelope, own) {
				return nil, v
			}
			return own, own.value
		}
		d = &decodedReply[V]{env: r.Envelope}
		raw, err := s.c.decodeHeader(r.Envelope, &d.e)
		if err != nil {
			s.c.corrupt(ctx, key, err)
			return nil, v
		}
		d.raw = raw
		s.shared.Store(d)
	}
	v, err := s.c.decodeValueOf(d.raw, d.e.negative)
	if err != nil {
		s.c.corrupt(ctx, key, err)
		return nil, v
	}
	return &d.e, v
}

// readMany implements [store]: MGET where all keys may live on one node, a
// pipeline of GETs on a Cluster.
func (s *redisStore[V]) readMany(ctx context.Context, ks []keys, mode readMode, each func(i int, e entry[V], found bool)) error {
	return s.p.ReadMany(ctx, ks, func(i int, r reply) {
		e, found, _ := s.c.decodeEntry(ctx, ks[i].Key, r, mode != readOwn)
		each(i, e, found)
	})
}

// set implements [store]: the lease is taken away, so a compute in flight
// cannot overwrite the value, and every replica's L1 is told.
func (s *redisStore[V]) set(ctx context.Context, k keys, e entry[V]) (int, uint64, error) {
	b, err := s.c.encodeEntry(e)
	if err != nil {
		return 0, 0, err
	}
	if err := s.p.Set(ctx, k, b, keepMillis(e.w, s.c.now())); err != nil {
		return 0, 0, err
	}
	var digest uint64
	if s.c.l1 != nil {
		// So that the Set's own announcement, when it comes back, finds
		// this envelope in L1 and leaves it.
		digest = s.c.l1.digestBytes(b)
	}
	return len(b), digest, nil
}

// delete implements [store] like set.
func (s *redisStore[V]) delete(ctx context.Context, k keys) error { return s.p.Delete(ctx, k) }

// notified implements [store]: a fill or Set notification that carried
// the envelope answers without a round trip.
func (s *redisStore[V]) notified(ctx context.Context, k keys, sub subscription) (entry[V], bool) {
	if w, ok := sub.(redisSubscription); ok {
		if p := w.Take(); isEnvelope(p) {
			if e, found, _ := s.c.decodeEntry(ctx, k.Key, reply{Envelope: p, Found: true}, false); found {
				s.p.Forget(k.Key) // see redisstore's readGroup.forget
				return e, true
			}
		}
	}
	return entry[V]{}, false
}

// subscribe implements [store] with the key's fill channel.
// The wait for Redis' confirmation is bounded by the budget: past it, the
// waiter polls.
func (s *redisStore[V]) subscribe(ctx context.Context, k keys) (subscription, error) {
	w, err := s.p.Subscribe(ctx, k.Channel())
	return redisSubscription{w}, err
}

// redisFailed records a Redis failure for the breaker, unless the caller's
// own context ended it or it came under load (Redis answering, slowly: not
// an outage, see redisstep.UnderLoad).
func (s *redisStore[V]) redisFailed(ctx context.Context, err error) {
	if !s.noteRedisError(ctx, err) || redisstep.UnderLoad(err) {
		return
	}
	opened := false
	if errors.Is(err, ErrRedisTimeout) {
		opened = s.c.brk.Silence(s.p.Budget().Timeout() / 2)
	} else {
		opened = s.c.brk.Failure()
	}
	if !opened && s.c.failingLogged.CompareAndSwap(false, true) {
		// The first failure of a run names its cause at once (a refused
		// dial reads "connect: connection refused"), before the breaker
		// opens; once, until Redis answers again.
		s.c.logRare(ctx, slog.LevelWarn, "stampede: Redis failing; calls go on without it (the breaker opens after BreakerThreshold failures in a row)", "", err,
			slog.String("addr", s.p.Addrs()), slog.Int("breaker_threshold", s.c.opts.BreakerThreshold))
	}
	if opened {
		s.c.failingLogged.Store(true)
		cause := err.Error()
		s.c.openCause.Store(&cause)
		s.c.logRare(ctx, slog.LevelError, "stampede: Redis unreachable, computing locally (breaker open)", "", err, slog.String("addr", s.p.Addrs()))
		s.c.observe(ctx, Event{Kind: EventBreakerOpen, Err: err})
	}
}

// noteRedisError counts and reports a Redis failure and, on a Cluster,
// has the slot map reloaded; it reports false, doing nothing, when the
// caller's own context ended it.
func (s *redisStore[V]) noteRedisError(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return false
	}
	s.c.stats.redisErrors.Add(1)
	s.c.observe(ctx, Event{Kind: EventRedisError, Err: err})
	s.p.ReloadTopology()
	return true
}

// redisOK records a Redis success.
func (s *redisStore[V]) redisOK(ctx context.Context) {
	if s.c.failingLogged.Load() {
		s.c.failingLogged.Store(false)
	}
	if s.c.brk.Success() {
		if s.c.kept != nil { // what the outage computed must not answer in the next one
			s.c.kept.Clear()
		}
		s.c.logRare(ctx, slog.LevelInfo, "stampede: Redis answers again (breaker closed)", "", nil, slog.String("addr", s.p.Addrs()))
		s.c.observe(ctx, Event{Kind: EventBreakerClosed})
	}
}

// keepMillis is how long Redis keeps an entry with windows w written at
// now: to the end of its error window (a re-armed fail-safe value keeps its
// old Created, so this is not w.Expire()).
func keepMillis(w stale.Windows, now time.Time) int64 {
	return max(w.ErrorUntil.Sub(now).Milliseconds(), 1)
}
