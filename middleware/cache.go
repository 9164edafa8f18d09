package middleware

// The middleware's handler: which requests pass by the cache (bypass), the
// Fetch of each cached one (following a marker to its variant: a fetch of
// its own, in fetch.go), and the answer its result becomes (respond).

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// The values of the status header.
const (
	StatusHit      = "HIT"
	StatusMiss     = "MISS"
	StatusStale    = "STALE"
	StatusShared   = "SHARED"
	StatusWaited   = "WAITED"
	StatusDegraded = "DEGRADED"
	StatusBypass   = "BYPASS"
)

// Cache returns middleware that caches GET and HEAD responses in c with
// default [Options].
func Cache(c *cache.Cache[Response]) func(http.Handler) http.Handler {
	return CacheWithOptions(c, Options{})
}

// CacheWithOptions returns middleware that caches GET and HEAD responses in
// c, and invalidates them when an unsafe request for their URL succeeds.
// A nil c makes a middleware that passes everything through.
func CacheWithOptions(c *cache.Cache[Response], opts Options) func(http.Handler) http.Handler {
	opts.setDefaults()
	return func(next http.Handler) http.Handler {
		return &handler{c: c, opts: opts, next: next, detached: make(detachedRuns, opts.MaxDetachedRuns)}
	}
}

type handler struct {
	c        *cache.Cache[Response]
	opts     Options
	next     http.Handler
	detached detachedRuns // detach.go
}

// maxMarkerHops bounds how many markers one request follows.
const maxMarkerHops = 3

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = h.opts.stripTagHeaders(w, r) // surrogate.go: tag headers never reach the client, whatever the path
	switch {
	case h.c == nil:
		h.bypass(w, r)
		return
	case !safeMethod(r.Method):
		h.passUnsafe(w, r)
		return
	}
	kr := h.admit(r) // admit.go: the request as the cache keys it and the handler sees it
	if kr == nil {
		h.bypass(w, r)
		return
	}
	urlKey := h.opts.Key(kr, h.opts.VaryHeaders)
	f := &fetch{h: h, tmpl: &template{src: kr}, key: urlKey, urlKey: urlKey, vary: h.opts.VaryHeaders}
	for hop := 0; ; hop++ {
		f.live = newLender(w, h.opts.StatusHeader)
		res, err := h.c.Fetch(context.WithValue(r.Context(), fetchKey, f), f.key, f.compute)
		if err != nil || res.Outcome == cache.Stale || (res.Outcome == cache.Hit && h.c.Policy().Beta > 0) {
			// The compute may run after this request returns (a
			// background refresh, or a run its departed client started):
			// it needs its copy of the request now.
			f.tmpl.get()
		}
		if streaming := f.live.takeBack(); streaming != nil {
			streaming.waitStreamed(r.Context()) // the response went to the client as the handler wrote it
			return
		}
		own := f.ownResult(res.Outcome, err)
		var ns *notStored
		if own == nil && errors.As(err, &ns) && !ns.selects(&h.opts, kr) {
			// It joined a run whose response is not stored and was made
			// for a request it differs from: the requests of its variant
			// that joined it share one run of their own.
			if next := f.regroup(kr, ns); next != nil {
				f = next
				continue
			}
		}
		if own != nil || err != nil || len(res.Value.VaryOn) == 0 {
			h.respond(w, r, kr, own, res, err)
			return
		}
		// A marker: the responses vary on request headers; look up this
		// request's variant.
		next := f.follow(kr, res.Value)
		if next.key == f.key || hop == maxMarkerHops {
			h.bypass(w, r) // a marker pointing at itself: leave the cache out of it
			return
		}
		f = next
	}
}

func (h *handler) bypass(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(h.opts.StatusHeader, StatusBypass)
	h.next.ServeHTTP(w, r)
}

// respond answers r (cached as kr) from its fetch: own is what this
// request's own handler run produced, if it ran one.
func (h *handler) respond(w http.ResponseWriter, r, kr *http.Request, own *produced, res cache.Result[Response], err error) {
	if err == nil && (errors.Is(res.Err, cache.ErrValueTooLarge) || errors.Is(res.Err, cache.ErrCodec)) {
		err = res.Err // computed but not stored: never shared beyond its own run
	}
	if own != nil && errors.Is(err, cache.ErrValueTooLarge) {
		h.logFailure(r, "response not stored", err)
	}
	if r.Context().Err() != nil {
		return // the client is gone; nothing to write
	}
	var ns *notStored
	var hp *handlerPanic
	switch {
	case own != nil && own.panicked != nil:
		panic(own.panicked.value) // this request's own handler panicked: let the server's recovery see it
	case errors.Is(err, cache.ErrInvalidated):
		// Each run of this request, its own included, was purged while it
		// ran, and the cache stopped running it again: no run it saw may
		// answer it (docs/http.md, "Purging").
		w.Header().Set("Retry-After", "1")
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	case own != nil:
		status := StatusMiss
		if res.Outcome == cache.Degraded {
			status = StatusDegraded
		}
		h.write(w, r, own.resp, status, 0)
	case err == nil && errors.Is(res.Err, cache.ErrSoftTimeout) && !h.staleAllowed(res.Value, true, time.Now()):
		// The cache answered with the kept response because the run is
		// slower than its SoftTimeout; this response may not be served
		// stale (RFC 9111 §4.2.4, §5.2.2.2: 504 is the answer).
		http.Error(w, http.StatusText(http.StatusGatewayTimeout), http.StatusGatewayTimeout)
	case err == nil:
		h.write(w, r, res.Value, statusOf(res.Outcome), res.Age)
	case errors.As(err, &ns) && ns.selects(&h.opts, kr):
		h.write(w, r, *ns.shared, statusOf(res.Outcome), 0)
	case errors.As(err, &hp):
		http.Error(w, "handler failed", http.StatusBadGateway)
	case errors.As(err, &ns), errors.Is(err, cache.ErrValueTooLarge), errors.Is(err, cache.ErrCodec):
		// Not shareable, made for a request this one differs from (after
		// the run of its variant's regrouped requests, too), or not
		// stored: only the run that made it may answer with it. Run the
		// handler for this request.
		h.bypass(w, r)
	case errors.Is(err, cache.ErrInvalidKey), errors.Is(err, cache.ErrClosed):
		h.bypass(w, r) // a URL too long to key, or a cache shut down: no cache, still an answer
	default:
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	}
}

func statusOf(o cache.Outcome) string {
	switch o {
	case cache.Hit:
		return StatusHit
	case cache.Stale:
		return StatusStale
	case cache.Shared:
		return StatusShared
	case cache.Waited:
		return StatusWaited
	case cache.Degraded:
		return StatusDegraded
	}
	return StatusMiss
}

// logFailure logs what the cache failed to do for r (Options.Logger).
func (h *handler) logFailure(r *http.Request, msg string, err error) {
	if h.opts.Logger != nil {
		h.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "middleware: "+msg,
			slog.String("url", r.URL.String()), slog.Any("error", err))
	}
}
