// Package wire is what the robustness suite and its replica processes say to
// each other: one JSON request a line on the replica's standard input, one
// JSON response a line on its standard output, matched by ID. It also holds
// the value every compute returns, which names the compute that made it, so
// that every answer in a history can be traced to its origin.
package wire

import (
	"strings"
	"time"
)

// The operations a replica runs, one per public path of cache.Cache.
const (
	OpGetOrCompute      = "get-or-compute"
	OpFetch             = "fetch"
	OpFetchWithFallback = "fetch-with-fallback"
	OpGetOrComputeMany  = "get-or-compute-many"
	OpGet               = "get"
	OpSet               = "set"
	OpDelete            = "delete"
	OpExpire            = "expire"
	OpInvalidateTags    = "invalidate-tags"
	OpExpireTags        = "expire-tags"
	OpClear             = "clear"
	OpStats             = "stats"
	// OpHTTPGet and OpHTTPPost go through the middleware: a chi route
	// cached by middleware.Cache on the replica's loopback HTTP server.
	OpHTTPGet  = "http-get"
	OpHTTPPost = "http-post"
	// OpHTTPPurge purges route responses by surrogate key (Request.Tags)
	// through middleware.PurgeHandler; an http-get's route tags its
	// response with its Request.Tags (a Surrogate-Key header).
	OpHTTPPurge = "http-purge"
)

// Config is a replica's configuration, passed as one JSON argument.
type Config struct {
	// Replica names the process in the history.
	Replica string
	// Mode is "redis" (one server), "cluster", "sentinel" or "local" (no
	// Redis: cache.New(nil, ...)).
	Mode string
	// Addrs are the Redis addresses this replica dials (its own fault
	// proxy's, for a single server); for "sentinel", the Sentinels'.
	Addrs []string
	// SentinelMaster is the monitored master's name, for "sentinel".
	SentinelMaster string
	// Origin is the origin's base URL (http://127.0.0.1:port).
	Origin string
	// Recommended builds the go-redis client with the README's recommended
	// options (ContextTimeoutEnabled, short timeouts, MaxRetries 1) instead
	// of go-redis' defaults.
	Recommended bool
	// Twin makes the replica run a second cache.Cache on the same go-redis
	// client with the same options and namespace (named Replica+TwinSuffix
	// in the history): the caches of one client share its pub/sub
	// connection and heartbeat, and two caches of one namespace its
	// invalidation channel.
	Twin bool `json:",omitempty"`
	// Options are the cache.Options durations and switches the run sets.
	Options Options
}

// TwinSuffix names a replica's twin cache in the history: "r0" + TwinSuffix.
const TwinSuffix = ".twin"

// Process is the replica process a history's replica name runs in: a
// twin's is its replica's.
func Process(replica string) string { return strings.TrimSuffix(replica, TwinSuffix) }

// Options mirrors the cache.Options a run varies.
type Options struct {
	Namespace        string
	TTL              time.Duration
	Stale            time.Duration
	StaleIfError     time.Duration
	FailSafeThrottle time.Duration
	SoftTimeout      time.Duration
	LeaseTTL         time.Duration
	ComputeTimeout   time.Duration
	WaitTimeout      time.Duration
	PollInterval     time.Duration
	BusyError        bool
	RedisTimeout     time.Duration
	BreakerCooldown  time.Duration
	L1Size           int
	L1TTL            time.Duration
	DegradedTTL      time.Duration
	InvalidationWait time.Duration
	Beta             float64
	// SlowCodec encodes large values slowly (see Compute.Pad).
	SlowCodec bool
}

// Compute says how the compute function of one call behaves. The traffic
// draws it; the replica's fn follows it.
type Compute struct {
	// Sleep is how long fn works (it honours its context).
	Sleep time.Duration
	// Fail makes fn return an error after Sleep.
	Fail bool
	// Panic makes fn panic after Sleep.
	Panic bool
	// NotFound makes fn return cache.ErrNotFound.
	NotFound bool
	// Unchanged makes fn answer cache.ErrUnchanged when the previous value
	// read the origin version it reads now; on the HTTP route, a 304 to the
	// middleware's If-None-Match (request-path revalidation).
	Unchanged bool
	// Tags are set with cache.SetTags.
	Tags []string
	// TTL, when positive, is set with cache.SetTTL.
	TTL time.Duration
	// Pad makes the value this many bytes larger: a large value is slow
	// to encode and to send, which widens the window of its fill.
	Pad int
	// FallbackFails makes the fallback of FetchWithFallback fail.
	FallbackFails bool
	// IgnoreContext makes fn work its Sleep whatever its context: past
	// ComputeTimeout, the cache releases its callers and leaves it to
	// finish in the background. The HTTP route's handler honours its
	// context whatever this says.
	IgnoreContext bool `json:",omitempty"`
	// FailOnce makes the request's first compute fail as Fail does, and
	// the next ones succeed: a batch whose compute failed computes again
	// when the value standing in for it was invalidated while it waited.
	FailOnce bool `json:",omitempty"`
}

// Request is one operation for a replica.
type Request struct {
	ID       int64
	Op       string
	Key      string   `json:",omitempty"`
	Keys     []string `json:",omitempty"`
	Tags     []string `json:",omitempty"`
	Deadline time.Duration
	Compute  Compute `json:",omitempty"`
	// Set's value and options.
	SetTTL   time.Duration `json:",omitempty"`
	SetStale time.Duration `json:",omitempty"`
	// Noise makes an http-get or http-post carry what the route must not
	// key on and its handler run must not see: an analytics cookie the
	// route ignores and an X-Forwarded-For. (Who the request is, the
	// principal, is the part of Key after "|": see HTTPKey.)
	Noise bool `json:",omitempty"`
	// Twin sends the operation to the replica's twin cache (Config.Twin);
	// never an HTTP one, which the replica's middleware serves.
	Twin bool `json:",omitempty"`
}

// HTTPKey splits an http-get or http-post key into the route key ("h0",
// the URL's /v/h0) and the principal the request carries, what the route's
// response is made for: ";"-separated name=value parts in name order,
// each a request header — auth (Authorization: Bearer v), lang (the cookie
// the route varies on), session (a session cookie: the request passes by
// the cache), host (X-Forwarded-Host). The route's handler stamps the
// value it makes with the same form of what it saw, so a response served
// to a request it was not made for names another key.
func HTTPKey(key string) (route, principal string) {
	route, principal, _ = strings.Cut(key, "|")
	return route, principal
}

// Value is what every compute, Set and fallback of the suite stores: it
// names where it came from.
type Value struct {
	Key string
	// Src is "compute", "set" or "fallback".
	Src string
	// ID is the origin's compute ID ("c42"), or "s<request ID>" for a Set,
	// "f<request ID>" for a fallback.
	ID string
	// Version is the origin version the compute read.
	Version int64
	// Tags are the tags the compute or Set gave the value.
	Tags []string `json:",omitempty"`
	// Unstored marks a route response stale on arrival (max-age=0): the
	// middleware stores none, and one that is tagged answers only its own
	// request, fenced by no purge (docs/http.md, "Purging").
	Unstored bool `json:",omitempty"`
	// Pad is stored with the value (see Compute.Pad) and never sent to
	// the suite.
	Pad []byte `json:"-"`
}

// Response is a replica's answer to one Request.
type Response struct {
	ID int64
	// Value is the answer of single-key operations (nil: none).
	Value *Value `json:",omitempty"`
	// Found is Get's found.
	Found bool `json:",omitempty"`
	// Values are GetOrComputeMany's answers.
	Values map[string]Value `json:",omitempty"`
	// KeyErrs are GetOrComputeMany's per-key errors, as error kinds.
	KeyErrs map[string]string `json:",omitempty"`
	// Outcome is Fetch's Result.Outcome ("hit", "miss", ...).
	Outcome string `json:",omitempty"`
	// ResultErr is Fetch's Result.Err as an error kind.
	ResultErr string `json:",omitempty"`
	// Err is the call's error as an error kind (see Kind), and ErrText its
	// message.
	Err     string `json:",omitempty"`
	ErrText string `json:",omitempty"`
	// Stats is the cache's Stats, for OpStats.
	Stats map[string]uint64 `json:",omitempty"`
	// Invoked and Returned are when the replica called the library and when
	// the call returned, in Unix nanoseconds of the machine's clock, which
	// the suite and every replica share: a history's intervals are then the
	// calls' own, without the pipes' delays.
	Invoked, Returned int64
	// Arrived, for an HTTP request, is when the replica's server handed
	// each attempt of it to the cache middleware, in Unix nanoseconds.
	Arrived []int64 `json:",omitempty"`
}

// The error kinds a replica reports, one per documented sentinel; "other"
// is anything else.
const (
	ErrInvalidated  = "invalidated"
	ErrUnavailable  = "unavailable"
	ErrRedisTimeout = "redis-timeout"
	ErrLeaseBusy    = "lease-busy"
	ErrDeadline     = "deadline"
	ErrCanceled     = "canceled"
	ErrOrigin       = "origin"
	ErrFallback     = "fallback"
	ErrPanic        = "panic"
	ErrNotFound     = "not-found"
	ErrClosed       = "closed"
	ErrSoftTimeout  = "soft-timeout"
	ErrFailSafe     = "fail-safe"
	// ErrComputeTimeout: the compute ran past ComputeTimeout (it matches
	// context.DeadlineExceeded too, and is told apart first).
	ErrComputeTimeout = "compute-timeout"
	ErrOther          = "other"
)
