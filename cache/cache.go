package cache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/stampede-go/stampede/cache/internal/clockmap"
	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/redisstore"
	"github.com/stampede-go/stampede/lease"
	"github.com/stampede-go/stampede/singleflight"
	"github.com/stampede-go/stampede/stale"
)

// Cache is a typed cache that computes each missing or expired key once per
// fleet. Create it with [New]; it is safe for concurrent use. Call
// [Cache.Close] to stop its background work; it does not close the Redis
// client.
type Cache[V any] struct {
	opts   Options
	policy stale.Policy
	clock  func() time.Time // time.Now; tests walk a timeline instead
	// realClock says clock is time.Now, whose readings carry the monotonic
	// clock the invalidation marks' trust is measured on.
	realClock bool
	typeTag   uint32 // fingerprint of V and the codec, in every envelope
	store     store[V]
	redis     *redisStore[V] // nil: process-local
	local     *localStore[V] // nil: Redis
	l1        *l1[V]         // nil when off
	// kept holds values computed while Redis was unreachable (nil: off, or
	// process-local mode); it is read only while Redis is unreachable.
	kept   *clockmap.Map[entry[V]]
	synced atomic.Bool // L1 may be filled: the invalidation channel is subscribed
	tracks *l1Tracks   // the keys L1 may hold, each with its channel subscribed (with L1 on)
	sf     singleflight.Group[loaded[V]]
	marks  *marks.Marks // the invalidation marks this process has used
	// keptFloor keeps out of kept what was computed before an invalidation
	// in this process: a kept entry's stamp.Gen is the floor it was
	// computed at (see keep).
	keptFloor atomic.Uint64
	brk       redisstep.Breaker
	// openCause is the failure that last opened the breaker, named by
	// the errors of the calls it keeps from Redis (see unavailable).
	openCause atomic.Pointer[string]
	// failingLogged: the current run of Redis failures has been logged
	// (its first failure, or the breaker's opening); cleared by a success.
	failingLogged atomic.Bool
	sem           *semaphore.Weighted
	stats         counters

	refreshing sync.Map // key -> struct{}: background work in flight
	bgCtx      context.Context
	bgCancel   context.CancelFunc
	bg         sync.WaitGroup
	sweepDone  chan struct{} // closed when the local sweeper stops

	mu         sync.Mutex // guards closed against bg.Add
	closed     bool
	closedFlag atomic.Bool // closed, for the hot path
	// evictionChecked: Ping has checked Redis' eviction policy (ping.go).
	evictionChecked sync.Once
	once            sync.Once
	// releaseProbe leaves the client's idle probe (redisstore.ProbeIdle);
	// nil: none.
	releaseProbe func()
	// beat starts the subscription's heartbeat however long the process
	// was quiet (notify.Notifier.Start); nil without one. A waiter calls
	// it as it begins and at each poll: its answer, when the leader's
	// value comes, is then vouched for by a heartbeat answered meanwhile,
	// not by a marks read on its request path (wait.go).
	beat func()
}

// heartbeatsPerWait is how many heartbeats of the invalidation
// subscription are sent per InvalidationWait: each answer vouches for the
// marks for InvalidationWait from its PING, so a Redis up to 3/4 of it
// away keeps them vouched for without a gap.
const heartbeatsPerWait = 4

// heartbeatIdle is how long the heartbeat runs on after the last decision
// that wanted it under steady traffic: 3 s, or four InvalidationWaits if
// longer (sixteen heartbeats at least). The heartbeat runs on credit
// (internal/notify's Heartbeat): each heartbeat period in which a decision
// wanted it grants it eight PINGs, up to this tail, so a decision alone
// costs Redis at most eight PINGs (two InvalidationWaits of heartbeats), and
// a process wanting it every period builds the whole tail up within a
// second and keeps it. A decision asks once, as it begins (not at its
// fence), and decisions less than δ/4 apart count as one. A decision that
// comes more than 2δ after the previous one wanting it does not start a
// stopped heartbeat: it reads the
// marks on its request path, as on a Cluster, and so does the next if it
// comes as late. A replica read less often than that (a fleet spread
// thin) so pays a marks read per read and no PING, where it paid the
// whole tail, about 120 PINGs at the default δ (issue 38).
//
// The tail is long because the reads an idle spell brings are steps like
// any other: against a Redis that stalls past the budget they are more
// steps that may be judged silent, and a stopped heartbeat's answers no
// longer show that Redis still answers. With a second here, a fleet idle
// for a second at a time against a Redis busy 150 ms at a stretch
// degraded callers (TestSlowRedisBusyKeepsOneComputePerKey, 3 runs in 8;
// with the credit and this tail, none in 12).
func heartbeatIdle(wait time.Duration) time.Duration { return max(3*time.Second, 4*wait) }

const (
	maxNamespaceBytes = 256
	maxKeyBytesLimit  = lease.MaxNameBytes - maxNamespaceBytes - 1
)

// New returns a Cache storing values of type V in rdb. A nil rdb makes a
// process-local cache: the same decisions and fences over a bounded
// in-memory store, no Redis. A standalone, Sentinel (failover) or Cluster
// client all work. With a client, New fails when the codec cannot encode V.
// In both modes, New refuses a V with a field the default codec would drop
// (see [Options.AllowDroppedFields]), so that a call answers the same value
// from Redis, L1, the process-local store or its own compute.
//
// New does not dial Redis and does not block: a wrong address or a Redis
// that is down shows as calls answering Degraded, and the first failure is
// logged with its cause. Call [Cache.Ping] at start-up, or behind a
// readiness probe, to find out before.
//
// Every cache on one client (the same rdb value) shares one pub/sub
// connection (one per master on a Cluster) and one heartbeat: a process
// pays for its subscriptions per client, not per cache.
//
// With a RedisTimeout (the default), the first cache on a client adds a
// hook to it ([redis.Hook]; once while caches use that client) that
// watches its dials and nothing else: a refused connection then ends the
// Redis steps waiting for it at once, with the dial's own error, instead
// of leaving them to go-redis' re-dials and their budget.
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
	if err := checkDroppedFields[V](opts); err != nil {
		return nil, err
	}
	c := &Cache[V]{opts: opts, policy: policy, clock: time.Now, realClock: true, typeTag: typeFingerprint[V](opts.Codec)}
	c.brk = redisstep.Breaker{Threshold: int32(opts.BreakerThreshold), Cooldown: opts.BreakerCooldown}
	if opts.MaxDegradedComputes > 0 {
		c.sem = semaphore.NewWeighted(int64(opts.MaxDegradedComputes))
	}
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
	c.marks = &marks.Marks{Trust: opts.InvalidationWait, Base: time.Now(), Spawn: c.goBackground, ErrUnavailable: ErrUnavailable}
	if isNilClient(rdb) {
		c.marks.Local = true
		c.local = newLocalStore[V](opts.MaxLocalEntries, opts.MaxLocalBytes, c.now)
		c.store = c.local
		c.startSweeper()
		c.initObserver()
		return c, nil
	}
	if err := checkCodec[V](opts.Codec); err != nil {
		return nil, err
	}
	rs, err := newRedisStore(c, rdb)
	if err != nil {
		return nil, err
	}
	c.redis, c.store = rs, rs
	// A closed cache sends no marks read: a call in flight across Close
	// judges by what this process knows, as when Redis is down, rather
	// than start a Redis step after Close returned.
	marksAvailable := func() bool { return !c.closedFlag.Load() && rs.available() }
	c.marks.Read, c.marks.Available, c.marks.Patience = rs.readMarks, marksAvailable, marksPatience(rs.p.Budget(), opts.WaitTimeout)
	c.marks.Answering, c.marks.Longest = rs.p.Budget().Answered, opts.WaitTimeout
	if opts.DegradedTTL > 0 {
		c.kept = clockmap.NewWeighted[entry[V]](opts.MaxLocalEntries, opts.MaxLocalBytes)
	}
	if size := l1Size[V](opts.L1Size); size > 0 {
		c.l1 = newL1[V](size, opts.L1MaxBytes, opts.L1TTL)
		c.tracks = newL1Tracks(2 * size)
		c.startTrackSweeper()
		rs.p.Notifier().OnReset = func() {
			c.synced.Store(false)
			c.l1.clears.Add(1)
			rs.p.ForgetAll() // before the clear: see invalidated
			c.l1.clear()
		}
		rs.p.Notifier().OnListening = func() {
			if !c.synced.Swap(true) {
				rs.p.ForgetAll()
				c.l1.clear() // what was put while unsubscribed cannot be vouched for
			}
		}
	}
	plain := oneServer(rdb)
	if c.l1 != nil || plain {
		// Subscribe in the background: New does not wait on Redis. L1 fills
		// only once Redis confirms the subscription (synced), and if Redis is
		// down go-redis subscribes when it is back.
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			_ = rs.p.Notifier().Listen(c.bgCtx, c.invalidationChannel(), c.invalidated)
		}()
	}
	if plain {
		// The subscription vouches for the marks (see internal/marks,
		// "Trusted by the subscription"). Not on a Cluster, where a PUBLISH
		// reaches the other nodes' subscribers over the cluster bus, after
		// the PUBLISH and unordered with their replies; nor on a Ring; nor
		// behind Sentinel, whose failover moves the commands to the new
		// master and leaves the subscription where it was.
		// The heartbeat runs only while decisions want its trust (Want,
		// from the marks' checks), on the credit they grant it, up to
		// heartbeatIdle after the last under steady traffic: an idle
		// cache sends Redis nothing, a seldom read one a marks read per
		// read (issue 38; see internal/marks, "Demand-driven").
		c.marks.Session = rs.p.Notifier().Session
		c.marks.Want = rs.p.Notifier().Want
		every := opts.InvalidationWait / heartbeatsPerWait
		idle := int((heartbeatIdle(opts.InvalidationWait) + every - 1) / every)
		rs.p.Notifier().Heartbeat(every, idle, c.marks.Mono, func(session uint64, sent int64) {
			c.marks.Beaten(session, sent)
			// A heartbeat's answer shows Redis answering and can raise
			// the budget's round trip, so a replica whose callers were
			// waiting when Redis turned slow does not take its first slow
			// step for silence (issue 30; see Budget.Heard). An idle one
			// learns it from its client's idle probe (redisstore.ProbeIdle).
			if c.marks.Clock == nil {
				rs.p.Budget().Heard(time.Duration(c.marks.Mono() - sent))
			}
		})
		// Started at once, as a cache is made to be used: the first
		// marks reads are then made after a heartbeat was answered, and
		// the heartbeat vouches for them from then on, instead of their
		// being read again once before it can (see marks' cover). A cache
		// left unused stops it after the few PINGs a start grants.
		rs.p.Notifier().Start()
		c.beat = rs.p.Notifier().Start
		if rs.p.Budget().Timeout() > 0 {
			c.releaseProbe = redisstore.ProbeIdle(rdb.(*redis.Client), rs.p.Budget().Heard, rs.p.Notifier().Beating, rs.p.Budget().Answered)
		}
	}
	c.initObserver()
	return c, nil
}

// initObserver tells an Observer with an Init(namespace string) method of
// the new cache, so that it can export the namespace's series at 0.
func (c *Cache[V]) initObserver() {
	if in, ok := c.opts.Observer.(interface{ Init(namespace string) }); ok {
		in.Init(c.opts.Namespace)
	}
}

// now is the cache's clock.
func (c *Cache[V]) now() time.Time { return c.clock() }

// l1put stores e, read at L1's version, in L1 when L1 is on and in sync
// with the invalidations; it reports whether it did.
func (c *Cache[V]) l1put(key string, e entry[V], version uint64) bool {
	if c.l1 == nil || !c.synced.Load() || !c.l1open(key) {
		return false
	}
	e.stamp = c.marks.Resolve(e.stamp)
	return c.l1.put(key, e, c.now(), version)
}

// l1version is L1's version now (0 when L1 is off).
func (c *Cache[V]) l1version() uint64 {
	if c.l1 == nil {
		return 0
	}
	return c.l1.version()
}

// filledHere brings this replica's L1 up to a fill it stored (other
// replicas hear of it from the fill script's announcement, which this one
// skips): the value l, when L1 may hold it, is put at version, taken before
// the fill was sent; otherwise, or when that put is refused (a newer write
// came, or a read in flight disagrees), the key is dropped, so that no
// older value stays.
func (c *Cache[V]) filledHere(key string, l loaded[V], err error, version uint64) {
	if c.l1 == nil {
		return
	}
	if l.cacheable(err) && c.l1put(key, l.entry(), version) {
		return
	}
	c.l1.invalidate(key)
}

// invalidationChannel carries the new marks of InvalidateTags, ExpireTags
// and Clear (see internal/marks; heard only with L1 on or on a single
// Redis: they speed things up, the marks' trust window is what the
// guarantee rests on). A key's fills, Sets and Deletes are announced on
// the key's own channel, which L1 tracks (l1_track.go).
func (c *Cache[V]) invalidationChannel() string {
	return "stampede:{" + c.opts.Namespace + "}:invalidate"
}

// invalidated raises the marks of an announced InvalidateTags, ExpireTags
// or Clear, or applies a write announced by a replica of an earlier
// version ("id key": those announced every write here) to L1.
func (c *Cache[V]) invalidated(payload string) {
	if strings.HasPrefix(payload, "\x00") {
		c.marks.Announced(payload)
		return
	}
	if c.l1 == nil {
		return // a fill, Set or Delete: news for L1 only
	}
	_, key, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	// A GET of key in flight may predate the write announced: reads that
	// start from now on must not join it. Forgotten before the floor rises,
	// so that a read whose version is at or past the new floor (whose put
	// L1 accepts) starts its own GET, sent after the announcement came.
	c.redis.p.Forget(key)
	c.l1.invalidate(key)
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

// Close stops background refreshes (cancelling their context and waiting
// for them) and the notification subscriptions, and frees the callers
// waiting on them. Later calls return [ErrClosed]. It does not close the
// Redis client. The caches on one client share its pub/sub connection and
// heartbeat: closing one leaves the others' subscriptions as they are, and
// the last one's Close closes the connection. That Close waits at most
// 100 ms for a pub/sub connection caught in its handshake with a Redis
// that does not answer (go-redis bounds that by its own DialTimeout and
// ReadTimeout only); that connection closes in the background when
// go-redis gives up.
func (c *Cache[V]) Close() error {
	var err error
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.closedFlag.Store(true)
		c.mu.Unlock()
		c.bgCancel()
		c.bg.Wait()
		if c.releaseProbe != nil {
			c.releaseProbe()
		}
		err = c.store.close()
		if c.sweepDone != nil {
			<-c.sweepDone
		}
	})
	return err
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
			case <-t.C:
				c.local.sweep()
			case <-c.bgCtx.Done():
				return
			}
		}
	}()
}

// oneServer reports whether every command and the subscription of rdb go
// to one Redis server: a plain client, not a Sentinel failover client
// (a *redis.Client too, whose failover moves only the command pools).
func oneServer(rdb redis.UniversalClient) bool {
	r, ok := rdb.(*redis.Client)
	return ok && r.Options().Addr != "FailoverClient"
}

// marksPatience is how long a marks read may take: what the budget expects
// of Redis lately; with no budget of ours (RedisTimeout < 0), WaitTimeout,
// a bound on a read that callers share whatever their own deadlines.
func marksPatience(b redisstep.Budget, wait time.Duration) func() time.Duration {
	if b.Timeout() <= 0 {
		return func() time.Duration { return wait }
	}
	return b.Expect
}
