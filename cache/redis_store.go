package cache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/fencelua"
	"github.com/stampede-go/stampede/lease"
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

// probeTimeout bounds the breaker's background PING.
const probeTimeout = time.Second

// redisStore is the [store] over Redis: entries are envelopes under
// {ns:k}:v, claims are lease/ leases whose fence the fill script checks,
// notifications travel on per-key (sharded on a Cluster) channels.
type redisStore[V any] struct {
	c      *Cache[V]
	rdb    redis.UniversalClient
	leases *lease.Client
	notify *notifier
	reads  readGroup                                    // shares concurrent hit-path GETs of one key
	getFn  func(context.Context, string) (reply, error) // s.get, bound once: a method value per read would allocate
}

var _ store[struct{}] = (*redisStore[struct{}])(nil)

func newRedisStore[V any](c *Cache[V], rdb redis.UniversalClient) (*redisStore[V], error) {
	opts := c.opts
	interval := max(opts.LeaseTTL/3, time.Millisecond)
	s := &redisStore[V]{c: c, rdb: rdb, notify: newNotifier(rdb)}
	s.getFn = s.get
	leases, err := lease.New(rdb, lease.Options{
		ExtendInterval: interval,
		MaxExtensions:  int(max(opts.ComputeTimeout, opts.RefreshTimeout)/interval) + 2,
		FenceTTL:       time.Duration(s.fenceTTL()) * time.Millisecond,
		OnExtend:       s.onExtend,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	s.leases = leases
	c.brk.probe = func() { c.goBackground("\x00probe", s.probe) }
	return s, nil
}

// probe is the breaker's half-open probe: one PING.
func (s *redisStore[V]) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.noteRedisError(context.Background(), err)
		}
		s.c.brk.probeFailed()
		return
	}
	s.redisOK(ctx)
}

func (s *redisStore[V]) available() bool { return s.c.brk.allow() }

func (s *redisStore[V]) close() error { return s.notify.close() }

// fenceTTL is how long a key's fence outlives its last move.
func (s *redisStore[V]) fenceTTL() int64 {
	o := s.c.opts
	keep := o.TTL + max(o.Stale, o.StaleIfError) + o.LeaseTTL
	return max(24*time.Hour, 4*keep).Milliseconds()
}

// shardArg tells the scripts how to announce on a key's channel: "1" for
// SPUBLISH on a Cluster (the channel lives on the key's own shard, as the
// waiters' SSUBSCRIBE does), "0" for PUBLISH.
func (s *redisStore[V]) shardArg() string {
	if s.notify.sharded() {
		return "1"
	}
	return "0"
}

// reply is one GET's answer: the raw envelope, or none.
type reply struct {
	s     string
	found bool
}

// read implements [store]. A shared read (the hit path) joins a GET of the
// key already in flight: under a hot key that turns N round trips into one,
// and each caller still decodes its own copy of the value.
func (s *redisStore[V]) read(ctx context.Context, k keys, mode readMode) (entry[V], bool, error) {
	var r reply
	var err error
	switch mode {
	case readShared:
		r, err = s.reads.do(ctx, k.value, s.getFn)
	case readOwn:
		r, err = s.get(ctx, k.value)
	case readWaiting:
		// A waiter's failure does not count towards the breaker (see
		// Cache.wait); its success still closes it.
		if r, err = s.getRaw(ctx, k.value); err == nil {
			s.redisOK(ctx)
		} else {
			s.noteRedisError(ctx, err)
		}
	}
	if err != nil {
		return entry[V]{}, false, err
	}
	return s.c.decodeEntry(ctx, k.key, r, mode != readOwn)
}

// get runs one GET, recording Redis' health for the breaker.
func (s *redisStore[V]) get(ctx context.Context, valueKey string) (reply, error) {
	r, err := s.getRaw(ctx, valueKey)
	if err != nil {
		s.redisFailed(ctx, err)
		return r, err
	}
	s.redisOK(ctx)
	return r, nil
}

// getRaw runs one GET. A key of another Redis type is a foreign entry, not a
// failure: it decodes as corrupt, and the next fill overwrites it.
func (s *redisStore[V]) getRaw(ctx context.Context, valueKey string) (reply, error) {
	v, err := s.rdb.Get(ctx, valueKey).Result()
	switch {
	case err == nil:
	case errors.Is(err, redis.Nil):
		return reply{}, nil
	case isWrongType(err):
		return reply{found: true}, nil
	case err != nil:
		return reply{}, fmt.Errorf("cache: read %s: %w", valueKey, err)
	}
	return reply{s: v, found: true}, nil
}

// isWrongType reports a WRONGTYPE reply: the key holds another Redis type.
func isWrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}

// readMany implements [store]: MGET where all keys may live on one node, a
// pipeline of GETs on a Cluster.
func (s *redisStore[V]) readMany(ctx context.Context, ks []keys, mode readMode, each func(i int, e entry[V], found bool)) error {
	vkeys := make([]string, len(ks))
	for i, k := range ks {
		vkeys[i] = k.value
	}
	give := func(i int, r reply) {
		e, found, _ := s.c.decodeEntry(ctx, ks[i].key, r, mode != readOwn)
		each(i, e, found)
	}
	fail := func(err error) error {
		s.redisFailed(ctx, err)
		return fmt.Errorf("cache: read %d keys: %w", len(ks), err)
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		vals, err := s.rdb.MGet(ctx, vkeys...).Result()
		if err != nil {
			return fail(err)
		}
		s.redisOK(ctx)
		for i, v := range vals {
			str, ok := v.(string)
			give(i, reply{s: str, found: ok})
		}
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(vkeys))
	for i, vk := range vkeys {
		cmds[i] = pipe.Get(ctx, vk)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
		return fail(err)
	}
	s.redisOK(ctx)
	for i, cmd := range cmds {
		v, err := cmd.Result()
		give(i, reply{s: v, found: err == nil || isWrongType(err)})
	}
	return nil
}

// claimMany implements [store] with the keys' leases: one EVALSHA for one
// key, one pipeline for several.
func (s *redisStore[V]) claimMany(ctx context.Context, ks []keys) []claimed {
	out := make([]claimed, len(ks))
	start := time.Now()
	if len(ks) == 1 {
		l, err := s.leases.Acquire(ctx, ks[0].name(), s.c.opts.LeaseTTL)
		var busy *lease.BusyError
		switch {
		case err == nil:
			out[0] = claimed{claim: claim{lease: l}, won: true}
		case errors.As(err, &busy):
			out[0] = claimed{remaining: busy.Remaining}
		default:
			s.redisFailed(ctx, err)
			out[0] = claimed{err: err}
		}
		s.c.observeClaim(ctx, ks[0].key, out[0], start)
		return out
	}
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.name()
	}
	leases, remaining, errs := s.leases.AcquireMany(ctx, names, s.c.opts.LeaseTTL)
	for i := range ks {
		switch {
		case leases[i] != nil:
			out[i] = claimed{claim: claim{lease: leases[i]}, won: true}
		case errs[i] != nil:
			s.redisFailed(ctx, errs[i])
			out[i] = claimed{err: errs[i]}
		default:
			out[i] = claimed{remaining: remaining[i]}
		}
		s.c.observeClaim(ctx, ks[i].key, out[i], start)
	}
	return out
}

// keepAlive implements [store]: the lease is extended while computing. A
// lost lease does not matter to the compute: the fence decides the fill.
func (s *redisStore[V]) keepAlive(ctx context.Context, cl claim) func() {
	_, stop := cl.lease.KeepAlive(ctx)
	return func() { _ = stop() }
}

// onExtend reports the lease's extensions while computing.
func (s *redisStore[V]) onExtend(l *lease.Lease, err error) {
	key := strings.TrimPrefix(l.Name(), s.c.opts.Namespace+":")
	ctx := context.Background()
	switch {
	case err == nil:
		s.c.observe(ctx, Event{Kind: EventLeaseExtended, Key: key})
	case errors.Is(err, lease.ErrLeaseLost):
		s.c.observe(ctx, Event{Kind: EventLeaseLost, Key: key, Err: err})
		s.c.logRare(ctx, slog.LevelWarn, "stampede: lease lost while computing; the fence decides whether the value is stored", key, err)
	default:
		s.redisFailed(ctx, err)
	}
}

// fillMany implements [store]: one fill script per entry (EVALSHA for one,
// a pipeline of EVAL for several: a pipeline cannot fall back on
// NOSCRIPT). A fill that fails on a Redis error is retried in the
// background (see refill).
func (s *redisStore[V]) fillMany(ctx context.Context, reqs []fillReq[V]) []fillResult {
	out := make([]fillResult, len(reqs))
	args := make([][]any, len(reqs))
	for i, r := range reqs {
		var err error
		if args[i], err = s.fillArgs(r); err != nil {
			out[i].unstored = err
			s.abandon(ctx, r.k, r.claim)
		}
	}
	cmds := make([]*redis.Cmd, len(reqs))
	if len(reqs) == 1 {
		if args[0] != nil {
			cmds[0] = fillScript.Run(ctx, s.rdb, fillKeys(reqs[0].k), args[0]...)
		}
	} else {
		pipe := s.rdb.Pipeline()
		for i, r := range reqs {
			if args[i] != nil {
				cmds[i] = fillScript.Eval(ctx, pipe, fillKeys(r.k), args[i]...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are per command
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		out[i].stored = s.filled(ctx, reqs[i].k, cmd)
		out[i].fenced = !out[i].stored && cmd.Err() == nil
		if !out[i].stored && cmd.Err() != nil {
			out[i].failed = true
			if ctx.Err() == nil {
				s.refill(reqs[i].k, args[i])
			}
		}
	}
	return out
}

func fillKeys(k keys) []string { return []string{k.value, k.lease(), k.fence()} }

// fillArgs encodes a fill for the fill script: envelope, TTL, token, fence,
// channel, SPUBLISH flag.
func (s *redisStore[V]) fillArgs(r fillReq[V]) ([]any, error) {
	b, err := s.c.encodeEntry(r.e, r.claim.lease.Fence())
	if err != nil {
		return nil, err
	}
	return []any{b, max(r.e.w.Expire().Milliseconds(), 1), r.claim.lease.Token(), r.claim.lease.Fence(), r.k.channel(), s.shardArg()}, nil
}

// refill retries a fill that failed on a Redis error (a failover, a
// restart) in the background, with backoff, for up to LeaseTTL+WaitTimeout:
// the replicas waiting for this value get it as soon as Redis answers
// instead of recomputing it. The fence makes a late fill safe: if a newer
// lease, Set or Delete happened meanwhile, it is rejected.
func (s *redisStore[V]) refill(k keys, args []any) {
	s.c.goBackground("\x00fill "+k.key, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, s.c.opts.LeaseTTL+s.c.opts.WaitTimeout)
		defer cancel()
		for attempt := 1; sleep(ctx.Done(), backoff(attempt)); attempt++ {
			cmd := fillScript.Run(ctx, s.rdb, fillKeys(k), args...)
			if cmd.Err() == nil || ctx.Err() != nil {
				switch stored := s.filled(ctx, k, cmd); {
				case stored:
					s.c.stats.refills.Add(1)
				case cmd.Err() == nil:
					s.c.fencedOut(ctx, k.key)
				}
				return
			}
			s.reloadTopology()
		}
	})
}

// filled reads the fill script's reply, reporting a rejected release; it
// says whether the value was stored (false: fenced out, or Redis failed).
// A Redis failure counts, but the value is good: only storing it failed.
func (s *redisStore[V]) filled(ctx context.Context, k keys, cmd *redis.Cmd) bool {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("cache: fill: unexpected reply %v", res)
	}
	if err != nil {
		s.redisFailed(ctx, err)
		return false
	}
	s.redisOK(ctx)
	if res[1] == 0 {
		s.c.observe(ctx, Event{Kind: EventReleaseRejected, Key: k.key})
	}
	return res[0] == 1
}

// abandon implements [store]: the lease is released and the waiters woken,
// so that one of them takes over at once.
func (s *redisStore[V]) abandon(ctx context.Context, k keys, cl claim) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	n, err := abandonScript.Run(actx, s.rdb, []string{k.lease()}, cl.lease.Token(), k.channel(), s.shardArg()).Int64()
	switch {
	case err != nil:
		s.redisFailed(actx, err)
	case n == 0:
		s.c.observe(ctx, Event{Kind: EventReleaseRejected, Key: k.key})
	}
}

// set implements [store]: the fence moves on, so a compute in flight
// cannot overwrite the value, and every replica's L1 is told.
func (s *redisStore[V]) set(ctx context.Context, k keys, e entry[V]) error {
	b, err := s.c.encodeEntry(e, 0)
	if err != nil {
		return err
	}
	err = setScript.Run(ctx, s.rdb, []string{k.value, k.fence()}, b, max(e.w.Expire().Milliseconds(), 1), s.fenceTTL(), k.channel(),
		s.c.invalidationChannel(), s.c.id+" "+k.key, s.shardArg()).Err()
	if err != nil {
		s.redisFailed(ctx, err)
		return fmt.Errorf("cache: set %s: %w", k.value, err)
	}
	s.reads.forget(k.value)
	return nil
}

// delete implements [store] like set.
func (s *redisStore[V]) delete(ctx context.Context, k keys) error {
	if err := deleteScript.Run(ctx, s.rdb, []string{k.value, k.fence()}, s.fenceTTL(), k.channel(),
		s.c.invalidationChannel(), s.c.id+" "+k.key, s.shardArg()).Err(); err != nil {
		s.redisFailed(ctx, err)
		return fmt.Errorf("cache: delete %s: %w", k.value, err)
	}
	s.reads.forget(k.value)
	return nil
}

// subscribe implements [store] with the key's fill channel.
func (s *redisStore[V]) subscribe(ctx context.Context, k keys) (subscription, error) {
	return s.notify.subscribe(ctx, k.channel())
}

// redisFailed records a Redis failure for the breaker, unless the caller's
// own context ended it.
func (s *redisStore[V]) redisFailed(ctx context.Context, err error) {
	if !s.noteRedisError(ctx, err) {
		return
	}
	if s.c.brk.failure() {
		s.c.logRare(ctx, slog.LevelError, "stampede: Redis unreachable, computing locally (breaker open)", "", err)
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
	s.reloadTopology()
	return true
}

// reloadTopology asks a Cluster client to reload its slot map after a
// failure: go-redis reloads it on MOVED, not when a dead master refuses
// connections, so without this a process whose only traffic went to that
// master would keep dialling it after its replica took over. Reloads are
// lazy and coalesced by go-redis.
func (s *redisStore[V]) reloadTopology() {
	if s.notify.cluster != nil {
		s.notify.cluster.ReloadState(context.Background())
	}
}

// redisOK records a Redis success.
func (s *redisStore[V]) redisOK(ctx context.Context) {
	if s.c.brk.success() {
		if s.c.kept != nil { // what the outage computed must not answer in the next one
			s.c.kept.clear()
		}
		s.c.logRare(ctx, slog.LevelInfo, "stampede: Redis answers again (breaker closed)", "", nil)
		s.c.observe(ctx, Event{Kind: EventBreakerClosed})
	}
}
