package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/scripts"
	"github.com/stampede-go/stampede/stale"
)

// probeTimeout bounds the breaker's background PING.
const probeTimeout = time.Second

// notifyMaxBytes is the largest envelope a fill or Set notification
// carries: a waiter on another replica gets such a value without a GET.
// Larger ones are announced with a marker, and the waiters GET them.
const notifyMaxBytes = 64 << 10

// redisStore is the [store] over Redis (protocol v2): at rest a key is one
// Redis key, its envelope {ns:k}:v; a claim is a lease {ns:k}:l holding its
// holder's random token, which exists only while the holder computes; a
// fill is a compare-and-set against that token, and Set and Delete take the
// lease away. Notifications travel on per-key (sharded on a Cluster)
// channels {ns:k}:n and carry the envelope when it is small enough.
type redisStore[V any] struct {
	c      *Cache[V]
	rdb    redis.UniversalClient
	notify *notifier
	budget redisstep.Budget                             // bounds each Redis step
	reads  readGroup                                    // shares concurrent hit-path GETs of one key, by cache key
	getFn  func(context.Context, string) (reply, error) // GET of a cache key's value, bound once: a method value per read would allocate
}

var _ store[struct{}] = (*redisStore[struct{}])(nil)

func newRedisStore[V any](c *Cache[V], rdb redis.UniversalClient) (*redisStore[V], error) {
	s := &redisStore[V]{c: c, rdb: rdb, notify: newNotifier(rdb), budget: redisstep.NewBudget(c.opts.RedisTimeout, c.opts.WaitTimeout, rdb, ErrRedisTimeout)}
	// The shared read names the value key only when it sends a GET: a
	// caller that joins a GET in flight builds no string.
	s.getFn = func(ctx context.Context, key string) (reply, error) { return s.get(ctx, c.keysFor(key).Value) }
	// The longest a GET may take: the budget while Redis answers in time,
	// and, while it answers slowly, up to the budget's ceiling.
	s.reads.within = s.budget.Longest()
	s.reads.calm = s.budget.Calm
	c.brk.Probe = func() { c.goBackground("\x00probe", s.probe) }
	return s, nil
}

// probe is the breaker's half-open probe: one PING, within
// max(probeTimeout, RedisTimeout), however long Redis stays silent meanwhile
// (a Redis slower than the budget answers it, and the budget learns its
// round trip).
func (s *redisStore[V]) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(probeTimeout, s.budget.Timeout()))
	defer cancel()
	if _, err := redisstep.Wait(ctx, s.budget, func(ctx context.Context) (string, error) {
		return s.rdb.Ping(ctx).Result()
	}); err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.noteRedisError(context.Background(), err)
		}
		s.c.brk.ProbeFailed()
		return
	}
	s.redisOK(ctx)
}

func (s *redisStore[V]) available() bool { return s.c.brk.Allow() }

func (s *redisStore[V]) close() error {
	s.budget.Release(s.rdb)
	return s.notify.Close()
}

// shardArg tells the scripts how to announce on a key's channel: "1" for
// SPUBLISH on a Cluster (the channel lives on the key's own shard, as the
// waiters' SSUBSCRIBE does), "0" for PUBLISH.
func (s *redisStore[V]) shardArg() string {
	if s.notify.Sharded() {
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
// and each caller still decodes its own copy of the value. A shared read
// needs only k.key (see hitKeys).
func (s *redisStore[V]) read(ctx context.Context, k keys, mode readMode) (entry[V], bool, error) {
	var r reply
	var err error
	switch mode {
	case readShared:
		r, err = s.reads.do(ctx, k.Key, s.getFn)
	case readOwn:
		r, err = s.get(ctx, k.Value)
	case readWaiting:
		// A waiter's failure does not count towards the breaker (see
		// Cache.wait); its success still closes it.
		if r, err = s.getRaw(ctx, k.Value); err == nil {
			s.redisOK(ctx)
		} else {
			s.noteRedisError(ctx, err)
		}
	}
	if err != nil {
		return entry[V]{}, false, err
	}
	if mode != readShared {
		s.reads.forget(k.Key) // this reply may answer a caller: see readGroup.forget
	}
	return s.c.decodeEntry(ctx, k.Key, r, mode != readOwn)
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
	v, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (string, error) {
		return s.rdb.Get(ctx, valueKey).Result()
	})
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
		vkeys[i] = k.Value
	}
	give := func(i int, r reply) {
		s.reads.forget(ks[i].Key) // not a read of the group: see readGroup.forget
		e, found, _ := s.c.decodeEntry(ctx, ks[i].Key, r, mode != readOwn)
		each(i, e, found)
	}
	fail := func(err error) error {
		s.redisFailed(ctx, err)
		return fmt.Errorf("cache: read %d keys: %w", len(ks), err)
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		vals, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) ([]any, error) {
			return s.rdb.MGet(ctx, vkeys...).Result()
		})
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
	cmds, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) ([]*redis.StringCmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(vkeys))
		for i, vk := range vkeys {
			cmds[i] = pipe.Get(ctx, vk)
		}
		_, err := pipe.Exec(ctx)
		if errors.Is(err, redis.Nil) || isWrongType(err) {
			err = nil // per key, below
		}
		return cmds, err
	})
	if err != nil {
		return fail(err)
	}
	s.redisOK(ctx)
	for i, cmd := range cmds {
		v, err := cmd.Result()
		give(i, reply{s: v, found: err == nil || isWrongType(err)})
	}
	return nil
}

// set implements [store]: the lease is taken away, so a compute in flight
// cannot overwrite the value, and every replica's L1 is told.
func (s *redisStore[V]) set(ctx context.Context, k keys, e entry[V]) (int, error) {
	b, err := s.c.encodeEntry(e)
	if err != nil {
		return 0, err
	}
	args := []any{b, keepMillis(e.w, s.c.now()), k.Channel(), s.c.invalidationChannel(), s.c.id + " " + k.Key, s.shardArg(), notifyMaxBytes}
	if _, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (any, error) {
		return scripts.Set.Run(ctx, s.rdb, []string{k.Value, k.Lease()}, args...).Result()
	}); err != nil {
		s.redisFailed(ctx, err)
		return 0, fmt.Errorf("cache: set %s: %w", k.Value, err)
	}
	s.reads.forget(k.Key)
	return len(b), nil
}

// delete implements [store] like set.
func (s *redisStore[V]) delete(ctx context.Context, k keys) error {
	if _, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (any, error) {
		return scripts.Delete.Run(ctx, s.rdb, []string{k.Value, k.Lease()}, k.Channel(),
			s.c.invalidationChannel(), s.c.id+" "+k.Key, s.shardArg()).Result()
	}); err != nil {
		s.redisFailed(ctx, err)
		return fmt.Errorf("cache: delete %s: %w", k.Value, err)
	}
	s.reads.forget(k.Key)
	return nil
}

// readNotified implements [store]: a fill or Set notification that carried
// the envelope answers without a round trip.
func (s *redisStore[V]) readNotified(ctx context.Context, k keys, sub subscription) (entry[V], bool, error) {
	if w, ok := sub.(redisSubscription); ok {
		if p := w.Take(); isEnvelope(p) {
			if e, found, _ := s.c.decodeEntry(ctx, k.Key, reply{s: p, found: true}, false); found {
				s.reads.forget(k.Key) // see readGroup.forget
				return e, true, nil
			}
		}
	}
	return s.read(ctx, k, readWaiting)
}

// subscribe implements [store] with the key's fill channel.
// The wait for Redis' confirmation is bounded by the budget: past it, the
// waiter polls.
func (s *redisStore[V]) subscribe(ctx context.Context, k keys) (subscription, error) {
	ctx, cancel := s.budget.Bound(ctx)
	defer cancel()
	w, err := s.notify.Subscribe(ctx, k.Channel())
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
		opened = s.c.brk.Silence(s.budget.Timeout() / 2)
	} else {
		opened = s.c.brk.Failure()
	}
	if opened {
		s.c.logRare(ctx, slog.LevelError, "stampede: Redis unreachable, computing locally (breaker open)", "", err, slog.String("addr", s.addrs()))
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
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// redisOK records a Redis success.
func (s *redisStore[V]) redisOK(ctx context.Context) {
	if s.c.brk.Success() {
		if s.c.kept != nil { // what the outage computed must not answer in the next one
			s.c.kept.Clear()
		}
		s.c.logRare(ctx, slog.LevelInfo, "stampede: Redis answers again (breaker closed)", "", nil, slog.String("addr", s.addrs()))
		s.c.observe(ctx, Event{Kind: EventBreakerClosed})
	}
}

// keepMillis is how long Redis keeps an entry with windows w written at
// now: to the end of its error window (a re-armed fail-safe value keeps its
// old Created, so this is not w.Expire()).
func keepMillis(w stale.Windows, now time.Time) int64 {
	return max(w.ErrorUntil.Sub(now).Milliseconds(), 1)
}
