// Package redisstore is the Redis protocol under cache (protocol v2), in
// bytes: at rest a key is one Redis key, its envelope {ns:k}:v; a claim is
// a lease {ns:k}:l holding its holder's random token, which exists only
// while the holder computes; a fill is a compare-and-set against that
// token, and Set and Delete take the lease away. Notifications travel on
// per-key (sharded on a Cluster) channels {ns:k}:n and carry the envelope
// when it is small enough.
//
// It speaks envelopes as strings and bytes, never a value: cache encodes
// and decodes them with its Codec (entry_codec.go) around each step. Every
// step runs within its budget (cache/internal/redisstep) and reports what
// it met through [Hooks], which cache hands in: a failure that counts
// towards the breaker, one that does not, a success, and the events and
// background work that are cache's to count, observe or run. Nothing here
// decides: which step runs, and what its answer means, is cache's.
//
// Where it lives: store.go the type, its hooks and Redis' health (PING,
// the addresses, the slot map); group.go the shared GET of the hit path;
// read.go the reads; write.go Set, Delete and Expire; fill.go claims and
// fills; lease.go a lease kept alive; marks.go the counter and the marks;
// idle_probe.go the PING that keeps an idle client's budget learning.
package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/notify"
	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
)

// ProbeTimeout bounds the breaker's background PING, and a dial that names
// why a PING timed out when the budget has no timeout.
const ProbeTimeout = time.Second

// NotifyMaxBytes is the largest envelope a fill or Set notification
// carries: a waiter on another replica gets such a value without a GET.
// Larger ones are announced with a marker, and the waiters GET them.
const NotifyMaxBytes = 64 << 10

// Config is what a Store needs to know of its cache's options.
type Config struct {
	// Namespace names every key (see cache/internal/rediskey).
	Namespace string
	// InvalidationChannel carries the announcements of the namespace's
	// invalidations (InvalidateTags, ExpireTags, Clear); a key's writes are
	// announced on its own channel.
	InvalidationChannel string
	// RedisTimeout and WaitTimeout bound a step (see redisstep.NewBudget).
	RedisTimeout, WaitTimeout time.Duration
	// LeaseTTL is a claim's lease; KeepFor is the longest its holder may
	// compute (max(ComputeTimeout, RefreshTimeout)).
	LeaseTTL, KeepFor time.Duration
	// ErrRedisTimeout is what a step past its budget matches; ErrClosed is
	// what a subscription answers once the store is closed.
	ErrRedisTimeout, ErrClosed error
	// Marks is the invalidation marks as the process holds them: the
	// counter read is restored past their floor (see ReadGen).
	Marks *marks.Marks
}

// Hooks are what a step reports to cache, and what it asks of it. Every
// hook is set before the store is used.
type Hooks struct {
	// Failed is a step's failure that counts towards the breaker.
	Failed func(ctx context.Context, err error)
	// Noted is a failure that does not (a waiter's read).
	Noted func(ctx context.Context, err error)
	// OK is a step that Redis answered.
	OK func(ctx context.Context)
	// Rejected is a fill or abandon that found the lease in another
	// holder's hands.
	Rejected func(ctx context.Context, key string)
	// Extended is a lease extended while its holder computes.
	Extended func(ctx context.Context, key string)
	// LeaseLost is a lease lost while its holder computes: taken (cause
	// nil), or unanswered for a whole LeaseTTL (cause the last failure).
	LeaseLost func(key string, cause error)
	// Refilled is a fill stored in the background after it failed.
	Refilled func(key string)
	// FencedOut is a background fill refused by the compare-and-set.
	FencedOut func(ctx context.Context, key string)
	// Spawn runs work in the background, once at a time per name.
	Spawn func(name string, work func(ctx context.Context))
	// Log logs a rare event an operator should see.
	Log func(ctx context.Context, level slog.Level, msg, key string, err error, extra ...slog.Attr)
}

// Store is the Redis protocol's steps for one cache.
type Store struct {
	cfg    Config
	h      Hooks
	rdb    redis.UniversalClient
	notify *notify.Notifier
	budget redisstep.Budget                             // bounds each Redis step
	reads  readGroup                                    // shares concurrent hit-path GETs of one key, by cache key
	getFn  func(context.Context, string) (Reply, error) // GET of a cache key's value, bound once: a method value per read would allocate
}

// New returns the steps of a cache on rdb.
func New(rdb redis.UniversalClient, cfg Config, h Hooks) *Store {
	s := &Store{cfg: cfg, h: h, rdb: rdb, notify: notify.New(rdb, cfg.ErrClosed),
		budget: redisstep.NewBudget(cfg.RedisTimeout, cfg.WaitTimeout, rdb, cfg.ErrRedisTimeout)}
	// The shared read names the value key only when it sends a GET: a
	// caller that joins a GET in flight builds no string.
	s.getFn = func(ctx context.Context, key string) (Reply, error) {
		return s.get(ctx, rediskey.For(cfg.Namespace, key).Value)
	}
	// The longest a GET may take: the budget while Redis answers in time,
	// and, while it answers slowly, up to the budget's ceiling.
	s.reads.within = s.budget.Longest()
	s.reads.calm = s.budget.Calm
	return s
}

// Notifier is the store's pub/sub: its share of its client's hub (one
// connection and one heartbeat for every store on the client), with the
// waiters' channels and the invalidation channel.
func (s *Store) Notifier() *notify.Notifier { return s.notify }

// Budget is what a step may cost.
func (s *Store) Budget() redisstep.Budget { return s.budget }

// Close stops the store's background work.
func (s *Store) Close() error {
	s.budget.Release(s.rdb)
	return s.notify.Close()
}

// Forget makes later shared reads of key start a GET of their own (see
// readGroup.forget): the process learned of a write, or read key by
// another route.
func (s *Store) Forget(key string) { s.reads.forget(key) }

// ForgetAll is Forget for every key: invalidations may have been missed.
func (s *Store) ForgetAll() { s.reads.forgetAll() }

// Flights is how many shared GETs are in flight.
func (s *Store) Flights() int {
	s.reads.mu.Lock()
	defer s.reads.mu.Unlock()
	return len(s.reads.flights)
}

// GetFunc is a GET of a cache key's value, as the shared read sends it.
type GetFunc = func(ctx context.Context, key string) (Reply, error)

// WrapGet replaces the shared read's GET with wrap's: for tests that hold
// a reply up on its way back. Call it before the store is used.
func (s *Store) WrapGet(wrap func(GetFunc) GetFunc) { s.getFn = wrap(s.getFn) }

// shardArg tells the scripts how to announce on a key's channel: "1" for
// SPUBLISH on a Cluster (the channel lives on the key's own shard, as the
// waiters' SSUBSCRIBE does), "0" for PUBLISH.
func (s *Store) shardArg() string {
	if s.notify.Sharded() {
		return "1"
	}
	return "0"
}

// Subscribe registers for channel's notifications and returns once they
// cannot be missed by a read that follows. The wait for Redis'
// confirmation is bounded by the budget: past it, the waiter polls.
func (s *Store) Subscribe(ctx context.Context, channel string) (*notify.Waiter, error) {
	ctx, cancel := s.budget.Bound(ctx)
	defer cancel()
	return s.notify.Subscribe(ctx, channel)
}

// Ping runs one PING within the budget.
func (s *Store) Ping(ctx context.Context) error {
	_, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (string, error) {
		return s.rdb.Ping(ctx).Result()
	})
	return err
}

// PingWait runs one PING for as long as ctx allows, however long Redis
// stays silent meanwhile, and no longer than a refused dial once Redis
// refuses connections (redisstep.Wait): the breaker's probe.
func (s *Store) PingWait(ctx context.Context) error {
	_, err := redisstep.Wait(ctx, s.budget, func(ctx context.Context) (string, error) {
		return s.rdb.Ping(ctx).Result()
	})
	return err
}

// ReloadTopology asks a Cluster client to reload its slot map after a
// failure: go-redis reloads it on MOVED, not when a dead master refuses
// connections, so without this a process whose only traffic went to that
// master would keep dialling it after its replica took over. Reloads are
// lazy and coalesced by go-redis.
func (s *Store) ReloadTopology() {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// DialCause dials the client's (first) address once, within the budget,
// and returns the dial's error: why a PING that timed out could not
// connect (nil when it can connect, or for a client whose address is not
// known).
func (s *Store) DialCause(ctx context.Context) error {
	network, addr := "tcp", ""
	switch r := s.rdb.(type) {
	case *redis.Client:
		network, addr = r.Options().Network, r.Options().Addr
	case *redis.ClusterClient:
		if a := r.Options().Addrs; len(a) > 0 {
			addr = a[0]
		}
	}
	if addr == "" || addr == "FailoverClient" || (network != "tcp" && network != "unix") {
		return nil
	}
	d := s.budget.Timeout()
	if d <= 0 {
		d = ProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}

// Addrs names the Redis server(s) the client is configured with, for
// error messages and log lines.
func (s *Store) Addrs() string {
	switch r := s.rdb.(type) {
	case *redis.Client:
		return r.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(r.Options().Addrs, ",")
	case *redis.Ring:
		var a []string
		for _, addr := range r.Options().Addrs {
			a = append(a, addr)
		}
		slices.Sort(a)
		return strings.Join(a, ",")
	}
	return fmt.Sprintf("(%T)", s.rdb)
}
