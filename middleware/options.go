package middleware

import (
	"log/slog"
	"net/http"
	"slices"
	"time"
)

// Options configures [CacheWithOptions]. The zero value is valid; each
// field's comment gives its default.
type Options struct {
	// Key builds the cache key of a request; vary are the request headers the
	// key must include (configured and learned from responses' Vary). A
	// key function of your own must hold everything the handler reads (the
	// path as sent, the query as sent, the forwarding headers: see [Key]),
	// or one request's answer is served to others; it should hash header
	// values, which may be credentials. Default: [Key].
	Key func(r *http.Request, vary []string) string
	// VaryHeaders are request headers that are always part of the key, on
	// top of those named by responses' Vary. Default: none.
	VaryHeaders []string
	// Statuses are the status codes that are stored. Default: any status
	// with a declared freshness lifetime (s-maxage, max-age or Expires;
	// RFC 9111 §3), and without one (the route's TTL) only the
	// heuristically cacheable 200, 203, 204, 300, 301, 308, 404, 405, 410
	// and 414 (RFC 9110 §15.1). A 5xx without a declared lifetime is never
	// stored, whatever this says, nor a 206 or 304 to the plain GET.
	Statuses []int
	// TTL is the route's freshness lifetime for responses that declare none
	// (no s-maxage, max-age or Expires). Default: the cache's TTL.
	TTL time.Duration
	// Stale and StaleIfError are the route's windows for responses without
	// stale-while-revalidate or stale-if-error. They never apply to a
	// response with must-revalidate, proxy-revalidate or s-maxage, nor with
	// DeclaredFreshnessOnly: there only the response's own directives
	// allow a stale answer (RFC 9111 §4.2.4). Default: the cache's.
	Stale, StaleIfError time.Duration
	// DeclaredFreshnessOnly stores only responses that declare their own
	// freshness lifetime (Cache-Control s-maxage or max-age, or Expires), adds
	// no ETag and serves nothing stale without the response's permission: the
	// middleware then behaves as an RFC 9111 shared cache in front of any
	// handler or reverse proxy. Other responses still answer the requests
	// that shared their handler run. Default: false.
	DeclaredFreshnessOnly bool
	// MaxBodyBytes is the largest body stored; a larger one is streamed
	// through to its client and not stored. Raise the cache's
	// MaxValueBytes with it (see [NewCache]). Default: 1 MiB.
	MaxBodyBytes int
	// CacheAuthorized lets requests carrying Authorization use the cache;
	// without it they pass through. Each credential then has entries of
	// its own: the route's responses vary on Authorization (as if they said
	// Vary: Authorization; the value is hashed into the key), so a response
	// made for one credential never answers another, nor an anonymous
	// request (RFC 9111 §3.5). Default: false.
	CacheAuthorized bool
	// IgnoreCookies names the request cookies that do not change the
	// route's response (analytics, consent, load-balancer stickiness): a
	// request carrying only these and VaryCookies uses the cache, and its
	// handler run does not see them. A name ending in "*" matches every
	// name with that prefix ("_ga*"). A request carrying any other cookie
	// passes through (BYPASS), as in Varnish: a session cookie makes a
	// response one client's. Default: none (every request with a cookie
	// passes through). Naming Cookie in VaryHeaders instead keys the whole
	// Cookie header (each distinct header its own entries, no cookie
	// removed).
	IgnoreCookies []string
	// VaryCookies names the request cookies the route's response depends
	// on (a language, a currency): the route's responses vary on them, as
	// if they said Vary on a Cookie header holding only these (their
	// values hashed into the key), and the handler run sees only these.
	// Default: none.
	VaryCookies []string
	// MaxDetachedRuns bounds the route's handler runs that go on after the
	// request that started them left (the run is detached: it fills the
	// cache for later requests). Past it, the run of a request that leaves
	// is cancelled and nothing is stored, so clients that leave at once
	// cannot keep more runs going than the route's own limits (chi's
	// Throttle, Timeout) allow, bounded only by the cache's
	// ComputeTimeout. The process bounds the detached runs of all its
	// routes together too, at 64. A background refresh (inside a stale
	// window) is not counted: it runs once per stored entry, not per
	// request. Default: 8.
	MaxDetachedRuns int
	// Invalidates decides whether an unsafe request (POST, PUT, DELETE...)
	// whose handler answered status invalidates the entries of its URL,
	// Location and Content-Location. Default: any status below 400 (RFC
	// 9111 §4.4), a redirect to a login page included; a route where
	// anonymous clients can POST may restrict it (to 2xx, or to
	// authenticated requests).
	Invalidates func(r *http.Request, status int) bool
	// TargetedHeader names the targeted cache-control field this cache
	// obeys (RFC 9213): when a response carries it and it parses (a
	// Structured Fields Dictionary), its directives replace those of
	// Cache-Control for this cache, which is one of the caches it targets;
	// the field itself is passed on untouched. "-" obeys none.
	// Default: "CDN-Cache-Control".
	TargetedHeader string
	// StatusHeader names the response header that says how a request was
	// answered. Default: "X-Cache".
	StatusHeader string
	// TagHeaders name the response headers whose values tag the stored
	// response with surrogate keys, for [Purge] and [PurgeHandler]:
	// Cache-Tag's keys are comma-separated (Cloudflare), every other
	// header's whitespace-separated (Surrogate-Key: Fastly, Souin). Keys
	// given with [Tag] join the first of them. Default: Surrogate-Key and
	// Cache-Tag.
	TagHeaders []string
	// KeepTagHeaders sends the tag headers on to the client (a CDN in front
	// that purges by the same keys, say). Default: false, they are removed
	// from every response before it leaves.
	KeepTagHeaders bool
	// Logger logs the responses that should have been stored and could not
	// be (larger than the cache's MaxValueBytes, say). Default: nil (no
	// logs).
	Logger *slog.Logger
}

// defaultMaxBodyBytes is Options.MaxBodyBytes' default.
const defaultMaxBodyBytes = 1 << 20

// defaultMaxDetachedRuns is Options.MaxDetachedRuns' default; a response
// cache's routes share 8 times as many (see detachedRuns).
const defaultMaxDetachedRuns = 8

func (o *Options) setDefaults() {
	if o.Key == nil {
		o.Key = Key
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = defaultMaxBodyBytes
	}
	if o.TargetedHeader == "" {
		o.TargetedHeader = "CDN-Cache-Control"
	}
	if o.StatusHeader == "" {
		o.StatusHeader = "X-Cache"
	}
	if o.MaxDetachedRuns <= 0 {
		o.MaxDetachedRuns = defaultMaxDetachedRuns
	}
	if o.Invalidates == nil {
		o.Invalidates = func(_ *http.Request, status int) bool { return status < 400 }
	}
	o.IgnoreCookies = slices.Clone(o.IgnoreCookies)
	o.VaryCookies = slices.Clone(o.VaryCookies)
	o.VaryHeaders = canonicalSorted(o.VaryHeaders)
	if o.TagHeaders = canonicalOnce(o.TagHeaders); len(o.TagHeaders) == 0 {
		o.TagHeaders = []string{HeaderSurrogateKey, HeaderCacheTag}
	}
}
