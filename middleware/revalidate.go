package middleware

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Revalidation on the request path. While the cache keeps a stored
// response (its stale windows, and for some responses the keep window
// below, given to the cache as the entry's stale-if-error window), the
// compute that replaces it — on the request path through the same single
// flight and fleet lease as any compute, or in the background — sends its
// validators (If-None-Match, If-Modified-Since) and turns a 304 into the
// stored response with updated headers (RFC 9111 §4.3). Whether a response
// kept past its windows may answer when the handler fails (or is slower
// than the cache's SoftTimeout) is decided here, not by the keep window:
// only inside the response's own stale windows (the route's, for an
// application cache), or, for a standards cache (DeclaredFreshnessOnly),
// when the origin could not be reached and the response does not forbid it
// (RFC 9111 §4.2.4).

// minKeep and maxKeep bound how long a stale response is kept: its
// freshness lifetime, at least a minute and at most a day.
const (
	minKeep = time.Minute
	maxKeep = 24 * time.Hour
)

// keepFor returns how long past its windows the stored response resp
// (fresh for fresh) is kept to be revalidated or to answer for an
// unreachable origin; 0 when it is not kept (see kept).
func (o *Options) keepFor(resp Response, fresh time.Duration) time.Duration {
	if !o.kept(resp) {
		return 0
	}
	return min(max(fresh, minKeep), maxKeep)
}

// kept reports whether resp is kept past its windows (see keepFor): with
// DeclaredFreshnessOnly every response, for revalidation and for an
// unreachable origin; in an application cache only a response with
// validators of the handler's own that may never be served stale
// (must-revalidate, proxy-revalidate, s-maxage). The others are
// revalidated while the route's or the cache's Stale and StaleIfError
// windows keep them, and past those windows nothing answers stale for
// them, not even the cache's SoftTimeout.
func (o *Options) kept(resp Response) bool {
	if o.DeclaredFreshnessOnly {
		return true
	}
	if etag, lastModified := validators(resp); etag == "" && lastModified == "" {
		return false
	}
	d := o.directives(resp.Header)
	return d.mustRevalidate || d.proxyRevalidate || d.sMaxAge >= 0
}

// previous returns the entry the fetch's compute replaces, if the cache
// still keeps it: from the cache's read (cache.Previous), or, for a
// background refresh, with a read of its own.
func (f *fetch) previous(ctx context.Context, background bool) *Response {
	if v, ok := cache.Previous[Response](ctx, f.key); ok {
		return &v
	}
	if !background {
		return nil
	}
	v, found, err := f.h.c.Get(ctx, f.key)
	if err != nil || !found {
		return nil
	}
	return &v
}

// noStandIn wraps a failure for which the kept response may not answer:
// it matches cache.ErrUncacheable, which no stale value stands in for.
type noStandIn struct{ err error }

func (e *noStandIn) Error() string        { return e.err.Error() }
func (e *noStandIn) Unwrap() error        { return e.err }
func (e *noStandIn) Is(target error) bool { return target == cache.ErrUncacheable }

// failed returns err, the failure of a handler run that replaced prev at
// now, wrapped so that prev does not answer for it unless it may:
// unreachable says the origin could not be reached (a 502 or 504 from the
// handler, or no answer before the compute's deadline).
func (h *handler) failed(prev *Response, err error, unreachable bool, now time.Time) error {
	if prev == nil || h.staleAllowed(*prev, unreachable, now) {
		return err
	}
	return &noStandIn{err: err}
}

// staleAllowed reports whether the kept response prev may answer at now
// for a run that failed (or, unreachable, did not answer in time).
func (h *handler) staleAllowed(prev Response, unreachable bool, now time.Time) bool {
	// A marker (its variants decide for themselves), a response stored
	// before StoredAt existed, or one not kept past its windows: the
	// cache's windows are its own and decide, as they always did.
	return len(prev.VaryOn) > 0 || prev.StoredAt == 0 || !h.opts.kept(prev) || h.mayStandIn(prev, unreachable, now)
}

// mayStandIn reports whether the stored response prev may answer at now
// for a handler run that failed.
func (h *handler) mayStandIn(prev Response, unreachable bool, now time.Time) bool {
	d := h.opts.directives(prev.Header)
	if d.mustRevalidate || d.proxyRevalidate || d.noCache {
		return false // §5.2.2.2, §5.2.2.8: never stale, not even on error
	}
	// Its windows as they were when it was stored: its lifetime less its
	// current age then, as store computed them.
	storedAt := time.Unix(0, prev.StoredAt)
	p := h.c.Policy()
	lifetime, declared := freshnessLifetime(d, prev.Header, storedAt)
	switch {
	case declared:
	case h.opts.TTL > 0:
		lifetime = h.opts.TTL
	default:
		lifetime = p.TTL
	}
	fresh := lifetime - currentAge(prev.Header, storedAt)
	fresh += time.Duration(float64(fresh) * p.Jitter) // the cache may have kept it fresh that much longer
	staleFor, staleIfError := h.opts.staleWindows(d)
	if staleFor < 0 {
		staleFor = p.Stale
	}
	if staleIfError < 0 {
		staleIfError = p.StaleIfError
	}
	if !now.After(storedAt.Add(fresh + max(staleFor, staleIfError))) {
		return true // inside its own stale windows
	}
	// A standards cache that cannot reach the origin may answer stale
	// unless the response forbids it; s-maxage implies proxy-revalidate
	// (§5.2.2.10).
	return unreachable && h.opts.DeclaredFreshnessOnly && d.sMaxAge < 0
}

// unreachableStatus reports whether a handler's status says the origin
// behind it could not be reached (a reverse proxy's answer when the
// connection failed or timed out).
func unreachableStatus(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// runFailed reports whether a handler run's error says the origin could
// not be reached: a deadline or a cancellation, not a panic or a response
// that is not stored.
func runFailed(err error) bool {
	var hp *handlerPanic
	var ns *notStored
	return !errors.As(err, &hp) && !errors.As(err, &ns)
}
