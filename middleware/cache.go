package middleware

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Options configures [CacheWithOptions]. The zero value is valid; each
// field's comment gives its default.
type Options struct {
	// Key builds the cache key of a request; vary are the request headers the
	// key must include (configured and learned from responses' Vary).
	// Default: [Key].
	Key func(r *http.Request, vary []string) string
	// VaryHeaders are request headers that are always part of the key, on
	// top of those named by responses' Vary. Default: none.
	VaryHeaders []string
	// Statuses are the status codes that are stored. Default: 200, 203, 301,
	// 404, 410. A 5xx is never stored, whatever this says.
	Statuses []int
	// TTL is the route's TTL for responses without s-maxage or max-age.
	// Default: the cache's TTL.
	TTL time.Duration
	// Stale and StaleIfError are the route's windows for responses without
	// stale-while-revalidate or stale-if-error. Default: the cache's.
	Stale, StaleIfError time.Duration
	// MaxBodyBytes is the largest body stored; a larger one is streamed
	// through to its client and not stored. Default: 1 MiB.
	MaxBodyBytes int
	// CacheAuthorized lets requests carrying Authorization use the cache;
	// without it they pass through. Default: false.
	CacheAuthorized bool
	// StatusHeader names the response header that says how a request was
	// answered. Default: "X-Cache".
	StatusHeader string
	// ClaimTimeout bounds how long a streamed (oversized) response waits for
	// the request that ran the handler to take it before the handler's writes
	// fail. Default: 5s.
	ClaimTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.Key == nil {
		o.Key = Key
	}
	if len(o.Statuses) == 0 {
		o.Statuses = []int{http.StatusOK, http.StatusNonAuthoritativeInfo, http.StatusMovedPermanently, http.StatusNotFound, http.StatusGone}
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.StatusHeader == "" {
		o.StatusHeader = "X-Cache"
	}
	if o.ClaimTimeout <= 0 {
		o.ClaimTimeout = 5 * time.Second
	}
}

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

// CacheWithOptions returns middleware that caches GET and HEAD responses in c.
// A nil c makes a middleware that passes everything through.
func CacheWithOptions(c *cache.Cache[Response], opts Options) func(http.Handler) http.Handler {
	opts.setDefaults()
	opts.VaryHeaders = canonicalSorted(opts.VaryHeaders)
	return func(next http.Handler) http.Handler {
		return &handler{c: c, opts: opts, next: next}
	}
}

type handler struct {
	c    *cache.Cache[Response]
	opts Options
	next http.Handler
}

func (h *handler) bypass(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(h.opts.StatusHeader, StatusBypass)
	h.next.ServeHTTP(w, r)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.c == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead) ||
		(!h.opts.CacheAuthorized && r.Header.Get("Authorization") != "") {
		h.bypass(w, r)
		return
	}
	run := &run{h: h, r: r}
	key := h.opts.Key(r, h.opts.VaryHeaders)
	res, err := h.c.Fetch(r.Context(), key, run.compute(key, h.opts.VaryHeaders))
	if err == nil && len(res.Value.VaryOn) > 0 {
		// A marker: responses vary on request headers; look up this request's variant.
		vary := union(h.opts.VaryHeaders, res.Value.VaryOn)
		vkey := h.opts.Key(r, vary)
		res, err = h.c.Fetch(r.Context(), vkey, run.compute(vkey, vary))
	}
	h.respond(w, r, run, res, err)
}

func (h *handler) respond(w http.ResponseWriter, r *http.Request, run *run, res cache.Result[Response], err error) {
	if r.Context().Err() != nil {
		return // the client is gone; nothing to write
	}
	ran := run.ranHandler.Load()
	status := statusOf(res.Outcome)
	if ran && res.Outcome != cache.Stale && res.Outcome != cache.Degraded {
		status = StatusMiss // this request's handler run answered it
	}
	var ns *notStored
	var hp *handlerPanic
	switch {
	case err == nil, errors.Is(err, cache.ErrValueTooLarge) && res.Value.Status != 0:
		h.write(w, r, res.Value, status, res.Age)
	case errors.As(err, &ns):
		switch {
		case ns.stream != nil && ran:
			ns.stream.deliver(w, r, h.opts.StatusHeader)
		case ns.resp.Status != 0 && (ns.shareable || ran):
			h.write(w, r, ns.resp, status, 0)
		default:
			// Private to the client it was made for: run the handler for this one.
			h.bypass(w, r)
		}
	case errors.As(err, &hp):
		if ran {
			panic(hp.value) // this request's own handler panicked: let the server's recovery see it
		}
		http.Error(w, "handler failed", http.StatusBadGateway)
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

// write sends a stored (or shared) response, answering If-None-Match.
func (h *handler) write(w http.ResponseWriter, r *http.Request, resp Response, status string, age time.Duration) {
	hdr := w.Header()
	for k, v := range resp.Header {
		hdr[k] = v
	}
	hdr.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
	hdr.Set(h.opts.StatusHeader, status)
	if etag := resp.Header.Get("ETag"); etag != "" && resp.Status/100 == 2 && noneMatch(r.Header.Values("If-None-Match"), etag) {
		hdr.Del("Content-Length")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// noneMatch reports whether an If-None-Match list matches etag (weak
// comparison, RFC 9110 13.1.2).
func noneMatch(values []string, etag string) bool {
	strip := func(s string) string { return strings.TrimPrefix(strings.TrimSpace(s), "W/") }
	want := strip(etag)
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if t == "*" || (t != "" && strip(t) == want) {
				return true
			}
		}
	}
	return false
}

// run is one request's pass through the middleware.
type run struct {
	h          *handler
	r          *http.Request
	ranHandler atomic.Bool // this request's compute ran the handler
}

// notStored carries a response that must not be stored: shareable ones go
// to every caller of the shared compute, the others only to the request
// that ran the handler. failure marks a 5xx, for which a stale response may
// answer instead.
type notStored struct {
	resp      Response
	reason    string
	shareable bool
	failure   bool
	stream    *stream
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

// compute returns the cache's compute function for this request under key.
func (run *run) compute(key string, vary []string) func(context.Context) (Response, error) {
	return func(ctx context.Context) (Response, error) {
		run.ranHandler.Store(true)
		h := run.h
		rec, done := h.serve(ctx, run.r)
		var out handlerOutcome
		select {
		case out = <-done:
		case s := <-rec.overflowed:
			return Response{}, &notStored{reason: "body over MaxBodyBytes", stream: s}
		case <-ctx.Done():
			rec.cancel()
			return Response{}, fmt.Errorf("middleware: handler: %w", context.Cause(ctx))
		}
		if out.panicked != nil {
			return Response{}, out.panicked
		}
		if out.stream != nil { // overflowed just as it finished
			return Response{}, &notStored{reason: "body over MaxBodyBytes", stream: out.stream}
		}
		resp := rec.response()
		return h.decide(ctx, run.r, key, vary, resp)
	}
}

// decide applies the storage rules to a complete response.
func (h *handler) decide(ctx context.Context, r *http.Request, key string, vary []string, resp Response) (Response, error) {
	d := parseCacheControl(resp.Header)
	names, star := varyNames(resp.Header)
	switch {
	case resp.Status >= 500:
		return Response{}, &notStored{resp: resp, reason: "5xx", shareable: true, failure: true}
	case d.noStore || d.private || d.noCache:
		return Response{}, &notStored{resp: resp, reason: "Cache-Control forbids a shared cache"}
	case len(resp.Header.Values("Set-Cookie")) > 0:
		return Response{}, &notStored{resp: resp, reason: "Set-Cookie"}
	case star:
		return Response{}, &notStored{resp: resp, reason: "Vary: *"}
	case !slices.Contains(h.opts.Statuses, resp.Status):
		return Response{}, &notStored{resp: resp, reason: "status " + strconv.Itoa(resp.Status), shareable: true}
	case d.ttl() == 0:
		return Response{}, &notStored{resp: resp, reason: "max-age=0", shareable: true}
	}
	if resp.Header.Get("ETag") == "" {
		sum := sha256.Sum256(resp.Body)
		resp.Header.Set("ETag", `"`+base64.RawURLEncoding.EncodeToString(sum[:18])+`"`)
	}
	ttl := d.ttl()
	if ttl < 0 {
		ttl = h.opts.TTL
	}
	staleFor, staleIfError := d.staleWhileRevalidate, d.staleIfError
	if staleFor < 0 && h.opts.Stale > 0 {
		staleFor = h.opts.Stale
	}
	if staleIfError < 0 && h.opts.StaleIfError > 0 {
		staleIfError = h.opts.StaleIfError
	}
	setWindows := func(ctx context.Context) {
		if ttl > 0 {
			cache.SetTTL(ctx, ttl)
		}
		cache.SetStale(ctx, staleFor, staleIfError)
	}
	if extra := missing(vary, names); len(extra) > 0 {
		// The response varies on request headers the key lacks: store it under
		// the key with their values, and a marker naming them under this one.
		full := union(vary, names)
		vkey := h.opts.Key(r, full)
		if vkey != key {
			if _, err := h.c.Fetch(ctx, vkey, func(ctx context.Context) (Response, error) {
				setWindows(ctx)
				return resp, nil
			}); err != nil && !errors.Is(err, cache.ErrValueTooLarge) {
				return Response{}, &notStored{resp: resp, reason: "variant not stored: " + err.Error(), shareable: false}
			}
			setWindows(ctx)
			return Response{VaryOn: names}, nil
		}
	}
	setWindows(ctx)
	return resp, nil
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

// handlerOutcome is how the handler's goroutine ended.
type handlerOutcome struct {
	panicked *handlerPanic
	stream   *stream
}

// serve runs the handler in a goroutine of its own, on a request detached
// from the client's cancellation, recording what it writes.
func (h *handler) serve(ctx context.Context, r *http.Request) (*recorder, <-chan handlerOutcome) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	req := r.Clone(hctx)
	if req.Method == http.MethodHead {
		req.Method = http.MethodGet // store the body a later GET needs
	}
	rec := newRecorder(h.opts.MaxBodyBytes, h.opts.ClaimTimeout, cancel)
	done := make(chan handlerOutcome, 1)
	go func() {
		var out handlerOutcome
		defer func() {
			if p := recover(); p != nil {
				out.panicked = &handlerPanic{value: p, stack: debug.Stack()}
			}
			out.stream = rec.finish(out.panicked)
			cancel()
			done <- out
		}()
		h.next.ServeHTTP(rec, req)
	}()
	return rec, done
}

// recorder is the ResponseWriter the handler writes to: it buffers up to a
// limit, then turns into a stream for the request that ran the handler.
type recorder struct {
	limit        int
	claimTimeout time.Duration
	cancel       context.CancelFunc

	mu         sync.Mutex
	header     http.Header
	sent       http.Header // header snapshot at WriteHeader
	status     int
	body       bytes.Buffer
	stream     *stream
	overflowed chan *stream
}

func newRecorder(limit int, claimTimeout time.Duration, cancel context.CancelFunc) *recorder {
	return &recorder{limit: limit, claimTimeout: claimTimeout, cancel: cancel,
		header: make(http.Header), overflowed: make(chan *stream, 1)}
}

// Header implements http.ResponseWriter.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader implements http.ResponseWriter.
func (rec *recorder) WriteHeader(status int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.writeHeaderLocked(status)
}

func (rec *recorder) writeHeaderLocked(status int) {
	if rec.status != 0 {
		return
	}
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	rec.status = status
	rec.sent = rec.header.Clone()
}

// Write implements http.ResponseWriter.
func (rec *recorder) Write(p []byte) (int, error) {
	rec.mu.Lock()
	rec.writeHeaderLocked(http.StatusOK)
	if rec.stream == nil && rec.body.Len()+len(p) <= rec.limit {
		n, err := rec.body.Write(p)
		rec.mu.Unlock()
		return n, err
	}
	if rec.stream == nil {
		rec.stream = newStream(rec.status, rec.sent, rec.body.Bytes(), rec.claimTimeout, rec.cancel)
		rec.body = bytes.Buffer{}
		rec.overflowed <- rec.stream
	}
	s := rec.stream
	rec.mu.Unlock()
	return s.pw.Write(p) // blocks until the client reads, or fails once it is gone
}

// finish ends the recording; it returns the stream when the body overflowed.
func (rec *recorder) finish(p *handlerPanic) *stream {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.stream != nil {
		if p != nil {
			rec.stream.pw.CloseWithError(p)
		} else {
			rec.stream.pw.Close()
		}
		return rec.stream
	}
	return nil
}

func (rec *recorder) response() Response {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	status, hdr := rec.status, rec.sent
	if status == 0 { // the handler wrote nothing
		status, hdr = http.StatusOK, rec.header.Clone()
	}
	for _, name := range hopByHop {
		hdr.Del(name)
	}
	return Response{Status: status, Header: hdr, Body: bytes.Clone(rec.body.Bytes())}
}

var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Age"}

// stream is an oversized response on its way to the request that ran the
// handler: the head and buffered prefix, then the rest through a pipe.
type stream struct {
	status int
	header http.Header
	prefix []byte
	pr     *io.PipeReader
	pw     *io.PipeWriter
	once   sync.Once
	claim  chan struct{}
}

func newStream(status int, header http.Header, prefix []byte, claimTimeout time.Duration, cancel context.CancelFunc) *stream {
	pr, pw := io.Pipe()
	s := &stream{status: status, header: header, prefix: bytes.Clone(prefix), pr: pr, pw: pw, claim: make(chan struct{})}
	go func() {
		t := time.NewTimer(claimTimeout)
		defer t.Stop()
		select {
		case <-s.claim:
		case <-t.C:
			// Nobody took it (the client left before the handler got this
			// far): fail the handler's writes so it ends.
			pr.CloseWithError(errors.New("middleware: streamed response not claimed"))
			cancel()
		}
	}()
	return s
}

// deliver copies the stream to w.
func (s *stream) deliver(w http.ResponseWriter, r *http.Request, statusHeader string) {
	s.once.Do(func() { close(s.claim) })
	defer s.pr.Close()
	hdr := w.Header()
	for k, v := range s.header {
		hdr[k] = v
	}
	hdr.Set(statusHeader, StatusMiss)
	w.WriteHeader(s.status)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := w.Write(s.prefix); err != nil {
		s.pr.CloseWithError(err)
		return
	}
	if _, err := io.Copy(w, s.pr); err != nil {
		var hp *handlerPanic
		if errors.As(err, &hp) {
			panic(http.ErrAbortHandler) // the body is cut; abort the connection
		}
		s.pr.CloseWithError(err)
	}
}
