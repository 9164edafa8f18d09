package cache

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stampede-go/stampede/stale"
)

// BusyPolicy says what a caller does when another replica holds the key's
// lease for longer than Options.WaitTimeout.
type BusyPolicy uint8

// The contention policies.
const (
	// BusyCompute computes the value anyway, without storing it (the lease
	// holder will). It bounds latency at the cost of one extra compute per
	// waiting process. Like the holder's, that compute is computed again
	// when an invalidation of its tags comes while it runs (see
	// [Cache.InvalidateTags]). This is the default.
	BusyCompute BusyPolicy = iota
	// BusyError returns [ErrLeaseBusy].
	BusyError
)

// Options configures a [Cache]. The zero value is valid; each field's
// comment gives its default.
type Options struct {
	// Namespace prefixes every Redis key of this cache: {Namespace:key}:v.
	// It may hold ASCII letters, digits and '_', '-', '.', '/' (no ':', so
	// no namespace and key can collide with another's). Caches sharing a
	// Redis should use distinct namespaces; caches of different value types
	// on one namespace never read each other's entries as values (each
	// envelope names its type), but they overwrite each other's.
	// Default: "stampede".
	Namespace string
	// TTL is how long a computed value is fresh. Default: 1m.
	TTL time.Duration
	// Stale is how long after TTL a value is still served (Outcome Stale)
	// while one caller in the fleet refreshes it in the background.
	// Default: 0 (expired values are recomputed while callers wait).
	Stale time.Duration
	// StaleIfError is how long after TTL a value is kept to answer, as
	// Outcome Stale with Result.Err set, when the compute fails (RFC 5861
	// stale-if-error). Below Stale it adds nothing. Default: 0.
	StaleIfError time.Duration
	// FailSafeThrottle is how long a stale value that answered for a failed
	// compute (StaleIfError) is served to the whole fleet, as Outcome Stale,
	// before the origin is tried again: the value is re-armed in the store,
	// so one failure costs one origin call per throttle across all replicas,
	// and the replicas waiting for the failed compute answer at once. A
	// value ExpireTags expired is not re-armed (see [Cache.ExpireTags]).
	// Default: 1s; negative turns it off.
	FailSafeThrottle time.Duration
	// SoftTimeout, when positive, bounds how long callers wait for a compute
	// while a value inside its StaleIfError window exists: past it they get
	// that value (Outcome Stale, Result.Err matching [ErrSoftTimeout]) and
	// the compute goes on in the background, filling when it ends.
	// ComputeTimeout stays the hard bound. Default: 0 (off).
	SoftTimeout time.Duration
	// Jitter spreads each write's TTL uniformly over TTL·(1 ± Jitter), in
	// [0, 1), so keys written together do not expire together. Default: 0.
	Jitter float64
	// Beta turns on XFetch early refresh: a caller refreshes a fresh value in
	// the background with a probability that rises as expiry nears, scaled
	// by the last compute's duration (on a hit from L1 as from Redis); 1 is
	// the paper's optimum. Default: 0 (off).
	Beta float64
	// NegativeTTL is how long a compute function's [ErrNotFound] is cached.
	// Default: min(TTL, 10s).
	NegativeTTL time.Duration
	// RefreshTimeout bounds a background refresh, which never blocks a
	// caller. Default: ComputeTimeout.
	RefreshTimeout time.Duration
	// LeaseTTL is the recompute lease's TTL; the lease is extended every
	// third of it while the compute runs, so it only matters when a holder
	// dies: then the others take over after LeaseTTL. Default: 5s.
	LeaseTTL time.Duration
	// ComputeTimeout bounds one run of the compute function, which runs
	// detached from the cancellation of the callers waiting for it.
	// Default: 30s.
	ComputeTimeout time.Duration
	// WaitTimeout bounds how long a process waits for another replica's
	// compute before OnBusy applies. Each caller's own context bounds its
	// own wait too. Default: 5s.
	WaitTimeout time.Duration
	// PollInterval caps the interval at which a waiting process re-reads the
	// key as a safety net for a lost fill notification. Default: 250ms.
	PollInterval time.Duration
	// OnBusy says what happens when WaitTimeout passes. Default: BusyCompute.
	OnBusy BusyPolicy
	// MaxValueBytes caps an encoded value stored in Redis (process-local
	// values are not encoded). Default: 1 MiB.
	MaxValueBytes int
	// MaxKeyBytes caps a key. Default: 1024.
	MaxKeyBytes int
	// Codec encodes values for Redis. Default: [MsgpackCodec], except that a
	// []byte or string V is stored as its raw bytes. [S2Codec] compresses
	// large values.
	Codec Codec
	// AllowDroppedFields lets V have fields the default codec does not
	// encode (unexported ones, at any depth, outside a type that encodes
	// itself). By default [New] refuses such a V, naming the field, in both
	// modes: a value read back from Redis would lack what a miss, L1 or
	// the process-local store hand out, so one call could answer two
	// values. Tag a field `msgpack:"-"` to drop it on purpose. With a
	// custom Codec the check is not made: what it keeps is its author's
	// responsibility. A []byte or string V is stored as its raw bytes. The
	// check runs once, in New: a hit, from L1 or Redis, pays nothing for it.
	AllowDroppedFields bool
	// RedisTimeout is the budget of each Redis step of a call (one
	// command, script or pipeline) while Redis answers within it, whatever
	// the go-redis client's own timeouts and retries are. A step past its
	// budget with no reply from Redis meanwhile (Redis silent: down) fails
	// with [ErrRedisTimeout], counts towards the breaker at once, and the
	// call goes on without Redis (Outcome Degraded, or an error from Get,
	// Set and Delete). A failed dial (a refused connection, an unknown
	// host; not a dial timeout) ends a waiting step at once with the
	// dial's error, although go-redis would dial again and retry: it costs
	// the call (almost) nothing and counts towards the breaker. The budget
	// before Redis' first reply is RedisTimeout too. A step past it while other replies keep coming
	// (Redis slow: load) is waited for, and the budget follows the observed
	// round trip: clamp(srtt + max(4·rttvar, srtt), RedisTimeout,
	// WaitTimeout), so a slow Redis never opens the breaker nor sends
	// callers to local computes (see docs/operating.md). Under CPU
	// starvation a quiet is not judged silence when the budget's own timer
	// fired more than a quarter of the budget late (this process starved),
	// nor when it is within twice the longest round trip past
	// RedisTimeout that Redis answered within the last WaitTimeout (a
	// Redis busy in bursts); both are judged only when a budget ends. The caller's
	// context bounds every step too. A budget below Redis' idle round trip
	// makes a lone caller's calls degrade: raise it for a distant Redis.
	// With a go-redis client built with ContextTimeoutEnabled, a step whose
	// context cannot be cancelled (the shared hit-path read) runs inline
	// while the budget is RedisTimeout; otherwise a step runs on a
	// goroutine of its own, which the caller stops waiting for.
	// The shared hit-path read runs on its caller's goroutine when that
	// caller has no deadline and Redis answers within RedisTimeout, or
	// when its deadline is past the longest the read may take (WaitTimeout
	// + 10ms: a slow Redis is waited for up to WaitTimeout): a
	// cancellation of such a caller is noticed when the read ends; a
	// deadline is always kept.
	// Default: 250ms (at 100ms, our own load test on 2 cores saw Redis steps
	// run past it with Redis healthy, and 2–5% of misses computed
	// degraded); negative turns it off (go-redis' timeouts apply).
	RedisTimeout time.Duration
	// BreakerThreshold is how many Redis failures in a row open the circuit
	// breaker (steps that found Redis silent less than RedisTimeout/2
	// apart count once: they saw the same silence), after which calls compute locally (Outcome Degraded) without
	// touching Redis until BreakerCooldown passes. Default: 5.
	BreakerThreshold int
	// BreakerCooldown is how long the breaker stays open before one call
	// probes Redis again: the call that finds it over starts a background
	// PING and waits for it up to one Redis budget (and its own deadline),
	// going to Redis if the PING closed the breaker. Default: 1s.
	BreakerCooldown time.Duration
	// L1Size is how many entries the in-process tier in front of Redis
	// holds: a hit there costs a map read, no round trip. Set, Delete and
	// fills on any replica invalidate every replica's L1 when their
	// announcement arrives; a replica that may have missed announcements
	// (its subscription reconnected) clears its L1; InvalidateTags,
	// ExpireTags and Clear are fenced on L1 hits as on Redis hits. Values
	// handed out from L1 are shared between callers.
	//
	// Default (0): 10,000 entries when V is a type callers cannot change
	// through (no pointer, slice, map, channel, func or interface anywhere
	// in it: strings, numbers, structs and arrays of them), else off; set
	// it to turn L1 on for other types too, and then treat the values as
	// read-only. Negative: off. Process-local mode has no L1 (its store is
	// in memory already).
	L1Size int
	// L1MaxBytes bounds what L1 holds, weighing each entry as its key,
	// its stored envelope's length and 128 bytes; an entry over 1/16 of it
	// is not held. Default: 64 MiB.
	L1MaxBytes int64
	// L1TTL bounds how long an entry stays in L1 (never past its fresh
	// window): the most a fill on another replica can go unseen here.
	// Default: min(TTL, 5s).
	L1TTL time.Duration
	// Observer receives the cache's events (outcomes, leases, computes,
	// waits, fence rejections, errors) for metrics and traces. Default: nil
	// (none, and no cost). An Observer with a method Init(namespace
	// string) has it called once by [New], before any event, so that it
	// can export the namespace's series at 0 (stampedeprom does).
	Observer Observer
	// Logger logs the rare events an operator should see: a lease lost, a
	// fill fenced out, a corrupt entry, a value not stored, the fail-safe
	// throttle engaging, the breaker opening and closing. Default:
	// slog.Default(); slog.New(slog.DiscardHandler) turns logging off.
	Logger *slog.Logger
	// MaxLocalEntries bounds the process-local store of a Cache without
	// Redis; beyond it, entries are evicted (CLOCK). Default: 100,000.
	MaxLocalEntries int
	// MaxLocalBytes bounds what the process-local store of a Cache without
	// Redis holds, and what a Cache with Redis keeps while Redis is
	// unreachable (see DegradedTTL): beyond it, entries are evicted (CLOCK),
	// as beyond MaxLocalEntries. These values are held as they are, not
	// encoded: an entry weighs its key, its tags, 128 bytes and its value's
	// Weight when the value implements [Weigher] (middleware.Response
	// does: its body and headers), else a string's or a []byte's length,
	// else nothing (only the entry's 128 bytes and key: implement Weigher
	// for a type that holds more); Stats().LocalBytes is the sum for a
	// Cache without Redis. An entry over MaxLocalBytes/16 is not stored (it answers its
	// callers, Result.Err matching [ErrValueTooLarge]; Set returns that
	// error). Default: 256 MiB; negative is an error.
	MaxLocalBytes int64
	// DegradedTTL is how long a value computed while Redis is unreachable
	// answers again in this process (Outcome Degraded) before it is
	// computed again; it is then kept for StaleIfError more to answer for a
	// failing origin. These values live in a process-local store bounded by
	// MaxLocalEntries and MaxLocalBytes, are only read while Redis is
	// unreachable, and are never written to Redis. Default: min(TTL, 1s); negative turns it off.
	DegradedTTL time.Duration
	// MaxDegradedComputes caps concurrent compute functions per process while
	// Redis is unreachable, so R replicas do not become a stampede of their
	// own. Default: 0 (no cap).
	MaxDegradedComputes int
	// InvalidationWait (δ) is how long this process trusts an invalidation
	// mark it read from Redis, from the moment the read was sent to the
	// moment of the decision it serves, and so how long
	// [Cache.InvalidateTags], [Cache.ExpireTags] and [Cache.Clear] wait
	// after writing their marks before they return: then no replica can
	// still trust a mark read before the write. A read vouches for the
	// decisions taken before it was sent however late its answer comes, so
	// a Redis farther away than δ costs a decision one mark read (a round
	// trip; two for a load's answer, fenced against computes in flight),
	// not the entry: δ need not exceed the round trip for entries to
	// answer, but fencing a compute in flight on a replica needs δ above
	// its one-way delay from Redis, pauses included (docs/invalidation.md,
	// "Failures and limits"). Hot tags are re-read
	// in the background every δ/2; a hit waits for a mark read at most once
	// per δ per tag while Redis answers within δ. With a single Redis (a
	// *redis.Client) the invalidation subscription vouches for the marks
	// instead, PINGed every δ/4: while its PINGs are answered within 3δ/4,
	// a path waits for a mark read only the first time the process meets a
	// tag (or after the subscription broke), however idle the process
	// (docs/how-it-works.md). Not used without Redis (process-local marks
	// are always current). Default: 100ms.
	InvalidationWait time.Duration
}

func (o *Options) setDefaults() {
	if o.Namespace == "" {
		o.Namespace = "stampede"
	}
	if o.TTL == 0 {
		o.TTL = time.Minute
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 5 * time.Second
	}
	if o.ComputeTimeout == 0 {
		o.ComputeTimeout = 30 * time.Second
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 5 * time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = 1 << 20
	}
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = 1024
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = min(o.TTL, 10*time.Second)
	}
	if o.RefreshTimeout == 0 {
		o.RefreshTimeout = o.ComputeTimeout
	}
	if o.L1TTL == 0 {
		o.L1TTL = min(o.TTL, 5*time.Second)
	}
	if o.L1MaxBytes == 0 {
		o.L1MaxBytes = 64 << 20
	}
	if o.Codec == nil {
		o.Codec = defaultCodec{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = 5
	}
	if o.DegradedTTL == 0 {
		o.DegradedTTL = min(o.TTL, time.Second)
	}
	if o.FailSafeThrottle == 0 {
		o.FailSafeThrottle = time.Second
	}
	if o.MaxLocalEntries == 0 {
		o.MaxLocalEntries = 100_000
	}
	if o.MaxLocalBytes == 0 {
		o.MaxLocalBytes = 256 << 20
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = time.Second
	}
	if o.RedisTimeout == 0 {
		o.RedisTimeout = 250 * time.Millisecond
	}
	if o.InvalidationWait == 0 {
		o.InvalidationWait = 100 * time.Millisecond
	}
}

func (o *Options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"TTL", o.TTL}, {"LeaseTTL", o.LeaseTTL}, {"ComputeTimeout", o.ComputeTimeout},
		{"WaitTimeout", o.WaitTimeout}, {"RefreshTimeout", o.RefreshTimeout}, {"NegativeTTL", o.NegativeTTL}, {"PollInterval", o.PollInterval}, {"BreakerCooldown", o.BreakerCooldown},
		{"InvalidationWait", o.InvalidationWait},
	} {
		if d.v < time.Millisecond {
			return bad("%s must be at least 1ms, got %s", d.name, d.v)
		}
	}
	for i := 0; i < len(o.Namespace); i++ {
		if b := o.Namespace[i]; !namespaceByte(b) {
			return bad("Namespace %q: byte %s at %d is not a letter, a digit or one of _ - . /", o.Namespace, quoteByte(b), i)
		}
	}
	switch {
	case o.RedisTimeout > 0 && o.RedisTimeout < time.Millisecond:
		return bad("RedisTimeout must be at least 1ms (or negative: none), got %s", o.RedisTimeout)
	case o.SoftTimeout < 0:
		return bad("SoftTimeout must not be negative, got %s", o.SoftTimeout)
	case o.MaxLocalEntries < 0 || o.MaxLocalEntries > 1<<26:
		return bad("MaxLocalEntries must be in [0, 2^26], got %d", o.MaxLocalEntries)
	case o.MaxLocalBytes < 0:
		return bad("MaxLocalBytes must not be negative, got %d", o.MaxLocalBytes)
	case o.Stale < 0:
		return bad("Stale must not be negative, got %s", o.Stale)
	case o.StaleIfError < 0:
		return bad("StaleIfError must not be negative, got %s", o.StaleIfError)
	case o.OnBusy > BusyError:
		return bad("unknown OnBusy policy %d", o.OnBusy)
	case o.MaxValueBytes < 0 || o.MaxValueBytes > 512<<20:
		return bad("MaxValueBytes must be in (0, 512 MiB], got %d", o.MaxValueBytes)
	case o.MaxKeyBytes < 0 || o.MaxKeyBytes > 64<<10:
		return bad("MaxKeyBytes must be in (0, 64 KiB], got %d", o.MaxKeyBytes)
	case o.BreakerThreshold < 0:
		return bad("BreakerThreshold must not be negative, got %d", o.BreakerThreshold)
	case o.L1Size > 1<<26:
		return bad("L1Size must be at most 2^26 (or negative: off), got %d", o.L1Size)
	case o.L1MaxBytes < 0:
		return bad("L1MaxBytes must not be negative, got %d", o.L1MaxBytes)
	case o.L1TTL < 0:
		return bad("L1TTL must not be negative, got %s", o.L1TTL)
	case o.MaxDegradedComputes < 0:
		return bad("MaxDegradedComputes must not be negative, got %d", o.MaxDegradedComputes)
	}
	return nil
}

// quoteByte quotes b as a Go character literal, a byte past ASCII as its
// escape ('\xc3'), not the Latin-1 letter it would otherwise print as.
func quoteByte(b byte) string {
	if b < utf8.RuneSelf {
		return strconv.QuoteRuneToASCII(rune(b))
	}
	return fmt.Sprintf(`'\x%02x'`, b)
}

// namespaceByte reports whether b may appear in a Namespace.
func namespaceByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-' || b == '.' || b == '/'
}

// policy is the freshness policy the options describe.
func (o *Options) policy() stale.Policy {
	return stale.Policy{TTL: o.TTL, Stale: o.Stale, StaleIfError: o.StaleIfError,
		Jitter: o.Jitter, Beta: o.Beta, NegativeTTL: o.NegativeTTL}
}
