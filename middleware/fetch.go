package middleware

// One request's Fetch of one key: its compute function, which runs the
// handler once, detached from every client, and keeps what the run produced
// for that request alone; a marker followed to its variant is a fetch of
// its own. What the run's response becomes in the cache is store.go.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache"
)

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
	regrouped  bool     // a run of its own for requests a joined run did not select (regroup)
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

// regroupGeneration is the generation of the keys unselected joiners
// regroup on: no marker has it (a marker's is base 36), so no request
// reaches them through one.
const regroupGeneration = "-"

// regroup returns the fetch that kr, a request that joined this fetch's
// run and was not selected by its response (ns, not stored), runs instead:
// on the key of kr's variant of the headers ns varies on, so that the
// requests of one variant that joined the run share one run of their own,
// through the cache's single flight and the fleet's lease, instead of each
// running the handler for itself. Nil when the fetch is such a run already
// (a request its response does not select either runs the handler for
// itself: the rounds are bounded).
func (f *fetch) regroup(kr *http.Request, ns *notStored) *fetch {
	if f.regrouped || ns.shared == nil {
		return nil
	}
	key := variantKey(f.h.opts.Key(kr, ns.vary), regroupGeneration)
	return &fetch{h: f.h, tmpl: f.tmpl, key: key, urlKey: f.urlKey, vary: ns.vary, regrouped: true}
}

// ownResult returns what this fetch's own run produced, when the Fetch's
// outcome and error say its answer is that run's: a value the cache
// answered (and its fence let through), or the error that run returned
// itself (a response not stored, a panic). Any other error says the cache
// judged nothing the run produced — it abandoned the run past
// ComputeTimeout, or a later attempt after the fence refused it failed
// without running it — and an error passes no fence: what the run
// recorded, whenever it finished, answers nothing (docs/http.md,
// "Purging").
func (f *fetch) ownResult(o cache.Outcome, err error) *produced {
	var ns *notStored
	var hp *handlerPanic
	if err != nil && !errors.As(err, &ns) && !errors.As(err, &hp) {
		return nil
	}
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
	var departed <-chan struct{} // the request leaves: the run goes on detached
	if live != nil {
		departed = live.gone
	}
	resp, err := f.h.run(ctx, req, runLive, departed)
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
// outgrows MaxBodyBytes (then run returns a *notStored); departed closes
// when the request that started the run leaves (nil for a background
// refresh), which it may do whether or not the run streams to it (a
// revalidating run does not).
func (h *handler) run(ctx context.Context, req *http.Request, live *lender, departed <-chan struct{}) (Response, error) {
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
	left := departed
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-rec.streaming:
			waiting = false
		case <-left:
			// The run goes on detached, to fill the cache: it takes one of
			// the route's and the process's detached slots, or is cancelled.
			left = nil
			release, ok := h.detached.acquire()
			if !ok {
				rec.abandon(errTooManyDetached)
				h.logFailure(req, "detached handler run cancelled", errTooManyDetached)
				return Response{}, &notStored{reason: errTooManyDetached.Error()}
			}
			defer release()
		case <-ctx.Done():
			if !rec.abandon(context.Cause(ctx)) {
				return Response{}, fmt.Errorf("middleware: handler: %w", context.Cause(ctx))
			}
			waiting = false
		}
	}
	return rec.result()
}
