package middleware

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/go-chi/chi/v5"
)

// A handler run outlives the request that triggered it (a client that
// disconnects, a stale-while-revalidate refresh in the background), so it
// works on copies of everything it reads from that request. chi pools its
// route context and resets it for another request once this one returns:
// the copy holds a clone of it, never the pooled pointer.

// requestConditionals are the request headers that would make a handler
// answer 304, 206 or 412: a shared run is a plain GET, and each request's
// own answer is derived from the full response (see write).
var requestConditionals = []string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range", "Range"}

// template is the detached copy of a request, made on first use: a hit,
// which runs no handler, does not pay for it. Whoever may leave a handler
// run behind (a background refresh, a run a departed client started) must
// call get before the request returns.
type template struct {
	once sync.Once
	src  *http.Request // the request, until copied
	req  *http.Request
}

// get returns the detached request (see detach).
func (t *template) get() *http.Request {
	t.once.Do(func() {
		t.req, t.src = detach(t.src), nil
	})
	return t.req
}

// detach returns the request that r's handler runs work on: a plain GET
// (HEAD stores the body a later GET needs) with r's routing state copied,
// free of r's cancellation. Call it while r is being served.
func detach(r *http.Request) *http.Request {
	d := r.Clone(withRouting(context.WithoutCancel(r.Context()), r.Context()))
	if d.Method == http.MethodHead {
		d.Method = http.MethodGet
	}
	for _, name := range requestConditionals {
		d.Header.Del(name)
	}
	d.Body, d.ContentLength = http.NoBody, 0
	return d
}

// forRun returns a copy of the detached request d for one handler run under
// ctx (which must carry d's values), with routing state of its own: a chi
// sub-router mounted behind the middleware writes to it while routing.
func forRun(ctx context.Context, d *http.Request) *http.Request {
	return d.Clone(withRouting(ctx, d.Context()))
}

// withRouting returns ctx carrying a copy of the routing state of from.
// net/http's ServeMux path values are copied by Request.Clone.
func withRouting(ctx, from context.Context) context.Context {
	if rctx := chi.RouteContext(from); rctx != nil {
		return context.WithValue(ctx, chi.RouteCtxKey, rctx.Clone())
	}
	return ctx
}

// Detached runs: a handler run whose request left goes on to fill the
// cache, outside the route's own limits (a router's Throttle or Timeout
// see the request end). Each route bounds how many do (Options.
// MaxDetachedRuns), and so does the process, over every route; past
// either bound the run is cancelled and nothing is stored.

// maxProcessDetachedRuns bounds the detached handler runs of every route
// in the process together.
const maxProcessDetachedRuns = 64

// processDetached holds a slot per detached run of the process.
var processDetached = make(chan struct{}, maxProcessDetachedRuns)

// errTooManyDetached cancels a run whose request left while the route or
// the process had as many detached runs as they allow.
var errTooManyDetached = errors.New("middleware: too many handler runs detached from their requests")

// detachedRuns holds a slot per detached run of one route.
type detachedRuns chan struct{}

// acquire takes a slot of the route and one of the process without
// waiting; release gives them back.
func (d detachedRuns) acquire() (release func(), ok bool) {
	select {
	case d <- struct{}{}:
	default:
		return nil, false
	}
	select {
	case processDetached <- struct{}{}:
	default:
		<-d
		return nil, false
	}
	return func() { <-processDetached; <-d }, true
}
