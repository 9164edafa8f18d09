package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
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
		return &handler{c: c, opts: opts, next: next}
	}
}

type handler struct {
	c    *cache.Cache[Response]
	opts Options
	next http.Handler
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
	case r.Method != http.MethodGet && r.Method != http.MethodHead,
		!h.opts.CacheAuthorized && r.Header.Get("Authorization") != "",
		r.Header.Get("Upgrade") != "",
		// Nothing of a no-store request or its response may be stored
		// (RFC 9111 §5.2.1.5); like Authorization, it costs its sender a
		// handler run of its own.
		r.Header.Get("Cache-Control") != "" && parseCacheControl(r.Header).noStore:
		h.bypass(w, r)
		return
	}
	kr := keyRequest(r)
	urlKey := h.opts.Key(kr, h.opts.VaryHeaders)
	f := &fetch{h: h, tmpl: &template{src: r}, key: urlKey, urlKey: urlKey, vary: h.opts.VaryHeaders}
	for hop := 0; ; hop++ {
		f.live = &lender{w: w, statusHeader: h.opts.StatusHeader}
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
		own := f.ownResult(res.Outcome)
		if own != nil || err != nil || len(res.Value.VaryOn) == 0 {
			h.respond(w, r, own, res, err)
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

// respond answers r from its fetch: own is what this request's own handler
// run produced, if it ran one.
func (h *handler) respond(w http.ResponseWriter, r *http.Request, own *produced, res cache.Result[Response], err error) {
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
	case errors.As(err, &ns) && ns.shared != nil:
		h.write(w, r, *ns.shared, statusOf(res.Outcome), 0)
	case errors.As(err, &hp):
		http.Error(w, "handler failed", http.StatusBadGateway)
	case errors.As(err, &ns), errors.Is(err, cache.ErrValueTooLarge), errors.Is(err, cache.ErrCodec):
		// Not shareable, or not stored: only the run that made it may
		// answer with it. Run the handler for this request.
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

// fetchKey marks the context of a request's own Fetch, so that its compute
// function knows when it runs for that request (and not as a background
// refresh).
var fetchKey = &struct{ name string }{"middleware fetch"}

// fetch is one request's Fetch of one key. Each fetch keeps what its own
// compute's handler run produced for its request alone: nothing of it is
// shared with the request's other fetches or with other requests.
type fetch struct {
	h          *handler
	tmpl       *template // the request, detached (see detach)
	key        string
	urlKey     string   // the key of the request's URL, where its marker lives
	vary       []string // the request headers in key
	generation string   // the marker's generation, for a variant
	live       *lender

	mu  sync.Mutex
	own *produced
}

// produced is what a request's own handler run produced.
type produced struct {
	resp     Response
	panicked *handlerPanic
}

// follow returns the fetch of the variant a marker points to; kr is the
// request to key.
func (f *fetch) follow(kr *http.Request, marker Response) *fetch {
	vary := union(f.h.opts.VaryHeaders, marker.VaryOn)
	key := variantKey(f.h.opts.Key(kr, vary), marker.Generation)
	return &fetch{h: f.h, tmpl: f.tmpl, key: key, urlKey: f.urlKey, vary: vary, generation: marker.Generation}
}

// keyRequest is the request whose key r uses: r, as a GET when r is a
// HEAD (HEAD is answered from the GET entry).
func keyRequest(r *http.Request) *http.Request {
	if r.Method != http.MethodHead {
		return r
	}
	g := r.WithContext(r.Context())
	g.Method = http.MethodGet
	return g
}

// ownResult returns what this fetch's own run produced, when the Fetch's
// outcome says its answer is that run's.
func (f *fetch) ownResult(o cache.Outcome) *produced {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch o {
	case cache.Hit, cache.Stale, cache.Shared, cache.Waited:
		return nil
	}
	return f.own
}

func (f *fetch) setOwn(p *produced) {
	f.mu.Lock()
	f.own = p
	f.mu.Unlock()
}

// compute is the fetch's compute function: it runs the handler and applies
// the storage rules. It runs for the fetch's request, or in the background
// to refresh a stale entry; only the former lends the request's writer and
// records what it produced. When the entry it replaces is still kept and
// has validators, the run is conditional (see revalidate.go).
func (f *fetch) compute(ctx context.Context) (Response, error) {
	var live *lender
	if ctx.Value(fetchKey) == f {
		live = f.live
		// A run before this one (purged while it ran: the cache computes
		// again) answers nothing now, whatever this one ends in.
		f.setOwn(nil)
	}
	prev := f.previous(ctx, live == nil)
	if prev != nil && len(prev.VaryOn) > 0 {
		// An expired marker holds no content, only where the variants
		// are: re-armed, it leads the request to its variant, which
		// revalidates itself with its own validators. It stays kept as
		// long as a response would.
		cache.SetStale(ctx, -1, max(f.h.c.Policy().StaleIfError, minKeep))
		return *prev, nil
	}
	req, validating := f.tmpl.get(), false
	// After a purge came while a run ran, the cache runs it again without
	// a previous response (cache.Previous): the purged one is not
	// revalidated, so a 304 cannot re-arm it (docs/http.md, "Purging").
	if prev != nil {
		req, validating = conditional(req, *prev)
	}
	req, tg := withTagger(req) // surrogate.go: collects the run's middleware.Tag keys
	runLive := live
	if validating {
		// The handler may answer the middleware's validators with a 304:
		// nothing of this run streams to a client that did not ask.
		runLive = nil
	}
	resp, err := f.h.run(ctx, req, runLive)
	var hp *handlerPanic
	if live != nil && errors.As(err, &hp) {
		f.setOwn(&produced{panicked: hp})
	}
	if err != nil {
		return Response{}, f.h.failed(prev, err, runFailed(err), time.Now())
	}
	if validating && resp.Status == http.StatusNotModified {
		resp = freshen(*prev, resp) // the stored body is still good (RFC 9111 §4.3.4)
	}
	resp = f.h.opts.mergeTags(resp, tg) // surrogate.go: Tag's keys join the stored tag header
	stored, answer, err := f.store(ctx, resp, prev)
	if live != nil {
		f.setOwn(&produced{resp: answer})
	}
	var ns *notStored
	if errors.As(err, &ns) && ns.failure {
		err = f.h.failed(prev, err, unreachableStatus(resp.Status), time.Now())
	}
	return stored, err
}

// store applies the storage rules to resp: it returns the value to store
// under the fetch's key (resp, or a marker when resp varies on request
// headers the key lacks) and the response to answer the fetch's own
// request with, or a *notStored.
func (f *fetch) store(ctx context.Context, resp Response, prev *Response) (stored, answer Response, err error) {
	h := f.h
	now := time.Now()
	v := h.opts.storage(resp, now)
	// Surrogate keys (surrogate.go): the entry carries the response's tags;
	// one with more than the cache allows answers its own request, not stored.
	tags, tagErr := responseTags(resp.Header, h.opts.TagHeaders)
	// A tagged response that is not stored carries no tags into the cache,
	// so no purge fences it: shared, it would answer a request that joined
	// its run after a purge of its keys returned. It answers only its own
	// request; the others run the handler (docs/http.md, "Purging"). A
	// failure (a 5xx: an error, not the URL's content; tagged, say, by a
	// handler that set its keys before it failed) is still shared, so that
	// a failing origin is not called once per waiting request.
	tagged := len(tags) > 0 || tagErr != nil
	if v.reason != "" {
		ns := &notStored{reason: v.reason, failure: v.failure}
		if v.shareable && (!tagged || v.failure) {
			ns.shared = &resp
		}
		return Response{}, resp, ns
	}
	if tagErr != nil {
		return Response{}, resp, &notStored{reason: tagErr.Error()}
	}
	resp = prepareForStorage(resp, now, !h.opts.DeclaredFreshnessOnly)
	resp.StoredAt = now.UnixNano()
	p := h.c.Policy()
	fresh, staleIfError := v.fresh, v.staleIfError
	if fresh < 0 {
		fresh = p.TTL
	}
	if staleIfError < 0 {
		staleIfError = p.StaleIfError
	}
	// Kept past its windows to be revalidated (revalidate.go decides
	// whether it may answer for a failure).
	staleIfError = max(staleIfError, h.opts.keepFor(resp, fresh))
	windows := func(ctx context.Context) {
		setTags(ctx, tags)
		if v.fresh > 0 {
			cache.SetTTL(ctx, v.fresh)
		}
		cache.SetStale(ctx, v.staleFor, staleIfError)
	}
	names, _ := varyNames(resp.Header)
	if len(missing(f.vary, names)) == 0 {
		windows(ctx)
		return resp, resp, nil
	}
	// resp varies on request headers the key lacks: store it under the
	// variant key with their values, and a marker naming them here.
	full := union(f.vary, names)
	generation := f.generation
	if generation == "" && prev != nil && len(prev.VaryOn) > 0 {
		generation = prev.Generation // a refreshed marker keeps its variants
	}
	if generation == "" || len(tags) > 0 {
		// A tagged response's variant is stored by a Fetch of its own,
		// begun after the handler ran: outside this compute's fence
		// against a purge during the run. Under a new generation it is
		// reachable only through this compute's marker, which the fence
		// refuses, so it is never served.
		generation = strconv.FormatUint(rand.Uint64(), 36)
	}
	vkey := variantKey(h.opts.Key(f.tmpl.get(), full), generation)
	if _, err := h.c.Fetch(ctx, vkey, func(ctx context.Context) (Response, error) {
		windows(ctx)
		return resp, nil
	}); err != nil {
		h.logFailure(f.tmpl.get(), "response not stored", err)
		return Response{}, resp, &notStored{reason: "variant not stored: " + err.Error()}
	}
	marker := Response{VaryOn: full, Generation: generation}
	if f.key != f.urlKey && len(tags) == 0 { // tagged: unfenced (see above), f.key's marker leads there
		// The URL's marker learns the longer list (its entry keeps the
		// cache's TTL); until then this key's marker leads there.
		if err := h.c.Set(ctx, f.urlKey, marker); err != nil {
			h.logFailure(f.tmpl.get(), "marker not updated", err)
		}
	}
	// A marker holds no content, only where the variants are: it lives at
	// least the cache's TTL, so that the variants of other header values,
	// stored later, are not orphaned when the first one expires.
	windows(ctx)
	cache.SetTTL(ctx, max(v.fresh, h.c.Policy().TTL))
	return marker, resp, nil
}

// notStored carries a response that must not be stored: a shareable one
// goes to every caller of the shared compute, the others only to the
// request whose run produced it. failure marks a 5xx, for which a stale
// response may answer instead.
type notStored struct {
	reason  string
	shared  *Response // nil when not shareable
	failure bool
}

func (n *notStored) Error() string { return "middleware: response not stored: " + n.reason }

// Is makes non-failures match cache.ErrUncacheable, so that no stale
// response stands in for them.
func (n *notStored) Is(target error) bool { return target == cache.ErrUncacheable && !n.failure }

type handlerPanic struct {
	value any
	stack []byte
}

func (p *handlerPanic) Error() string {
	return fmt.Sprintf("middleware: handler panicked: %v\n%s", p.value, p.stack)
}

// run runs the handler once on a copy of req, detached from every client,
// and returns its complete response. live is the client it passes 1xx
// responses to, and streams the response to when the handler flushes or
// outgrows MaxBodyBytes (then run returns a *notStored).
func (h *handler) run(ctx context.Context, req *http.Request, live *lender) (Response, error) {
	hctx, cancel := context.WithCancel(req.Context())
	done := make(chan struct{})
	rec := newRecorder(h.opts.MaxBodyBytes, live, cancel, done)
	go func() {
		defer close(done)
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				rec.finish(&handlerPanic{value: p, stack: debug.Stack()})
			}
		}()
		h.next.ServeHTTP(rec, forRun(hctx, req))
	}()
	select {
	case <-done:
	case <-rec.streaming:
	case <-ctx.Done():
		if !rec.abandon(context.Cause(ctx)) {
			return Response{}, fmt.Errorf("middleware: handler: %w", context.Cause(ctx))
		}
	}
	return rec.result()
}

// missing returns the names not in have (both sorted).
func missing(have, names []string) []string {
	var out []string
	for _, n := range names {
		if _, found := slices.BinarySearch(have, n); !found {
			out = append(out, n)
		}
	}
	return out
}

// union returns the header names of a and b, canonical, sorted, once each.
func union(a, b []string) []string { return canonicalSorted(append(slices.Clone(a), b...)) }

func canonicalSorted(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, http.CanonicalHeaderKey(strings.TrimSpace(n)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
