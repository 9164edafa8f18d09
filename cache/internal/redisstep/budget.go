// Package redisstep bounds each Redis step of a cache (one command, script
// or pipeline) and judges Redis from how its steps end: the budget a step
// may take (Budget, Run, Wait), the estimate of Redis' round trip that the
// budget follows and that tells a slow Redis from a down one (health.go),
// and the circuit breaker that a down Redis opens (Breaker). It knows
// nothing of what a step reads or writes: a step is a function of a
// context that returns a value of any type and an error.
//
// cache hands it the public sentinel a step past its budget matches
// (cache.ErrRedisTimeout); the mark of a failure under load (see
// UnderLoad) is this package's own.
package redisstep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/dialwatch"
)

// Budget bounds each Redis step of a call (one command, script or
// pipeline) by Options.RedisTimeout and by the caller's context, whatever
// go-redis' own timeouts and retries are.
//
// go-redis ignores a context's deadline on socket reads and writes unless
// the client was built with ContextTimeoutEnabled: its ReadTimeout (3 s by
// default), its DialTimeout (5 s) and its retries with backoff (3) apply
// instead. So, for such a client, a step runs on a goroutine of its own and
// the caller stops waiting for it when the budget or its context ends; the
// goroutine finishes when go-redis gives up. A client that honours
// deadlines runs the step inline, under a context bounded by the budget,
// when the caller's context cannot be cancelled (the shared hit-path read
// runs detached from its callers' cancellation): go-redis honours a
// deadline on the socket, not a cancellation.
//
// A step that failed because its pooled connection had died (see
// [BrokenConn]) runs again within the same budget, at most once per idle
// connection the client's pools then held: after an outage the pools can
// hold connections that died without the client's kernel being told (a
// restarted host, a failover to a new machine, a proxy or NAT that forgot
// them), which go-redis' check of an idle connection cannot see, and each
// would otherwise cost a call (go-redis keeps pipelines in a pool of their
// own, which the breaker's PING never touches).
type Budget struct {
	d time.Duration // RedisTimeout; 0: no budget of our own
	// inline: the client honours context deadlines on socket I/O.
	inline bool
	// idle counts the client's idle pooled connections; nil: no retries.
	idle func() int
	// h tells a slow Redis from a down one and sets each step's budget
	// (at least d); nil when d is 0.
	h *redisHealth
	// steppers run the steps that do not run inline; nil: a goroutine of
	// its own for each.
	steppers *stepPool
}

// NewBudget returns the budget of rdb's steps: d (RedisTimeout) while
// Redis answers within it, following Redis' observed round trip up to ceil
// (WaitTimeout) while it answers slowly. A step that runs out of its budget
// fails with an error matching errTimeout (cache.ErrRedisTimeout). Call
// Release when the cache closes.
func NewBudget(d, ceil time.Duration, rdb redis.UniversalClient, errTimeout error) Budget {
	b := Budget{d: max(d, 0), inline: honoursDeadlines(rdb), idle: func() int { return idleConns(rdb) }, steppers: newStepPool()}
	if b.d > 0 {
		b.h = newRedisHealth(b.d, ceil, rdb, errTimeout)
	}
	return b
}

// Release drops the budget's use of rdb's shared observations (see
// redisHealth); the budget must not be used afterwards.
func (b Budget) Release(rdb redis.UniversalClient) {
	if b.h != nil {
		b.h.release(rdb)
	}
	if b.steppers != nil {
		b.steppers.close()
	}
}

// stepPool keeps the goroutines that run steps off their callers'
// goroutines (Run with a client that ignores deadlines, Wait) between
// steps. A goroutine started for each step would start on the smallest
// stack, which go-redis' call path grows (copying it twice) at every step,
// and would pay its own start and exit: on the shared hit-path read, once
// per GET, on the critical path of every caller waiting for it (issue 26).
// A step still running when its caller stops waiting (Redis silent) keeps
// its goroutine until go-redis gives up; the next step finds another.
type stepPool struct {
	jobs chan func()   // unbuffered: a send succeeds only to an idle stepper
	quit chan struct{} // closed by close: idle steppers exit
	once sync.Once
	idle atomic.Int32
}

// maxIdleSteppers bounds the steppers kept idle: more would be started
// only by a burst of concurrent steps (claims, fills), which the pool need
// not keep for later.
const maxIdleSteppers = 8

func newStepPool() *stepPool {
	return &stepPool{jobs: make(chan func()), quit: make(chan struct{})}
}

// run runs job on an idle stepper, or on a new one, which stays for later
// steps; on a goroutine of its own without a pool.
func (p *stepPool) run(job func()) {
	if p == nil {
		go job()
		return
	}
	select {
	case p.jobs <- job:
	default:
		go p.work(job)
	}
}

// work runs job, then the jobs sent to it, until the pool closes or holds
// enough idle steppers already.
func (p *stepPool) work(job func()) {
	for {
		job()
		if p.idle.Add(1) > maxIdleSteppers {
			p.idle.Add(-1)
			return
		}
		select {
		case job = <-p.jobs:
			p.idle.Add(-1)
		case <-p.quit:
			p.idle.Add(-1)
			return
		}
	}
}

// close makes the idle steppers exit, and every busy one once its step
// ends.
func (p *stepPool) close() { p.once.Do(func() { close(p.quit) }) }

// Timeout is the budget's floor, RedisTimeout; 0 with no budget of our own.
func (b Budget) Timeout() time.Duration { return b.d }

// Expect is how long a step may take while Redis answers as it did lately:
// the budget's estimate (the smoothed round trip plus four deviations, at
// least twice the smoothed round trip) without its floor, RedisTimeout, and
// within its ceiling; 0 with no budget of our own or before a first reply.
// A step that must fail fast when Redis is silent, yet be waited for when
// Redis is slow, is bounded by max(its own bound, Expect).
func (b Budget) Expect() time.Duration {
	if b.h == nil {
		return 0
	}
	return b.h.expect()
}

// idleConns is how many idle connections rdb's pools hold, its pipelines'
// pool included.
func idleConns(rdb redis.UniversalClient) int {
	st := rdb.PoolStats()
	n := int(st.IdleConns)
	if st.PipelineStats != nil {
		n += int(st.PipelineStats.IdleConns)
	}
	return n
}

// BrokenConn reports that a step failed because its connection was closed
// or reset under it (go-redis then drops that connection from its pool):
// not a timeout, not a refused dial, not Redis' reply. The request may not
// have reached Redis, or Redis may have run it and lost the reply; every
// step is one that go-redis' own MaxRetries runs again on such an error.
func BrokenConn(err error) bool {
	if err == nil || err == redis.Nil {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// NoReply reports whether err says that Redis did not answer (a timeout,
// a closed, reset or refused connection, the step's context ended): not a
// reply, not even an error reply. A step that sends several commands
// (a pipeline, or a script whose command keeps its own error) returns
// such an error as its own, so that Run judges it (load or outage) and
// learns no round trip from it; an error reply (NOSCRIPT, WRONGTYPE) stays
// the command's.
func NoReply(err error) bool { return err != nil && !isReply(err) }

// attempt runs step, and again while it fails on a broken connection, the
// client's pools still hold idle connections that may have died the same
// way, and ctx lasts.
// Each reply (a late one too, whose caller stopped waiting) feeds b's
// health.
func attempt[T any](ctx context.Context, b Budget, step func(context.Context) (T, error)) (T, error) {
	v, err := timed(ctx, b, step)
	if !BrokenConn(err) || b.idle == nil {
		return v, err
	}
	for n := b.idle(); n > 0 && BrokenConn(err) && ctx.Err() == nil; n-- {
		v, err = timed(ctx, b, step)
	}
	return v, err
}

// timed runs step once, recording a reply and its round trip.
func timed[T any](ctx context.Context, b Budget, step func(context.Context) (T, error)) (T, error) {
	if b.h == nil {
		return step(ctx)
	}
	start := time.Now()
	v, err := step(ctx)
	if isReply(err) {
		b.h.replied(time.Since(start))
	}
	return v, err
}

// honoursDeadlines reports whether rdb bounds socket I/O by the context's
// deadline (ContextTimeoutEnabled).
func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return r.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return r.Options().ContextTimeoutEnabled
	}
	return false
}

// stepResult is what a step's goroutine hands back.
type stepResult[T any] struct {
	v   T
	err error
}

// Run runs step within budget b and ctx. The budget starts at
// b.h.rto(), RedisTimeout while Redis answers within it: when it ends and
// no reply at all came from Redis meanwhile (Redis silent; "meanwhile"
// stretched to twice the longest round trip past RedisTimeout that Redis
// answered within the last WaitTimeout, when longer: see silenceWindow),
// and this process was not itself starved of CPU (the budget's timer,
// or for a step cut inline on its socket the wake-up at its deadline,
// fired less than a quarter of the budget late), the step fails
// with an error matching the budget's errTimeout (an outage, which counts
// towards the breaker); while replies keep coming (Redis slow), the caller
// waits on, one budget after another, up to WaitTimeout (then the failure
// is marked errRedisLoad). When ctx ends first, ctx's cause. The step must
// not touch the caller's variables: it returns what it read.
func Run[T any](ctx context.Context, b Budget, step func(context.Context) (T, error)) (T, error) {
	return run(ctx, b, step, false)
}

// RunPatient is Run for a step whose late reply must not be lost: with a
// client that honours deadlines (ContextTimeoutEnabled), Run's step is cut
// at its caller's deadline on the socket, so a Redis that turned slower
// than that deadline gives no reply at all, and nothing teaches the
// budget (Expect) its new round trip; the next step, bounded alike, fails
// alike. RunPatient's step is not bound by its caller's deadline: it runs
// on, up to the budget's ceiling (WaitTimeout), while its caller stops
// waiting at its deadline, so that its late reply teaches the budget, as
// with a client that ignores deadlines. For the invalidation marks' reads,
// whose bound (InvalidationWait, or what the budget expects) must follow
// a Redis that turned slow within InvalidationWait (issue 39).
func RunPatient[T any](ctx context.Context, b Budget, step func(context.Context) (T, error)) (T, error) {
	return run(ctx, b, step, b.inline)
}

// run is Run; patient: the step runs on past ctx's deadline (RunPatient).
func run[T any](ctx context.Context, b Budget, step func(context.Context) (T, error), patient bool) (T, error) {
	if b.d <= 0 {
		return attempt(ctx, b, step)
	}
	d := b.h.rto()
	// Inline only when nothing but the deadline can end ctx: go-redis
	// takes a context's deadline to the socket, never its cancellation (a
	// cancelled caller, or Close cancelling background work, would sit out
	// the budget). An inline step cannot be waited for past its deadline,
	// so it runs inline only while Redis answers well within RedisTimeout;
	// cut under load, it makes the budget back off, and cut with Redis
	// silent, it sends the next steps to a goroutine, which can learn
	// from a late reply, until a reply comes within the budget.
	// A failed dial of the client ends the step's wait at once, with the
	// dial's error, unless a reply came since the step began (dial.go).
	// An inline step is not ended by a failed dial (that would cost every
	// hit a cancellable parent): it runs inline only once Redis has
	// answered and no dial has failed since its last reply, so only the
	// steps already in flight when Redis starts refusing connections wait
	// out their budget.
	e := b.h.epoch.Load()
	if b.inline && ctx.Done() == nil && d == b.d && !b.h.cut.Load() && !b.h.dialSuspect() {
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		v, err := attempt(sctx, b, step)
		if err != nil && !isReply(err) {
			if cause := b.h.dialCause(e, start); cause != nil {
				return v, cause
			}
		}
		if err != nil && ended(sctx) && !isReply(err) {
			// Cut late (its deadline's wake-up came more than a quarter
			// of the budget after the deadline): this process was
			// starved of CPU, and a reply may have sat unread in its
			// socket; as on a goroutine (below), that is load, not
			// silence.
			took := time.Since(start)
			starved := took-d >= d/4
			if starved || b.h.answering(d) {
				b.h.sample(took) // cut under load: back off
			} else {
				b.h.cut.Store(true) // silent, or slow past the budget: find out on a goroutine
			}
			if starved {
				return v, &loadError{fmt.Errorf("%w (%s, cut %s late: this process was starved of CPU): %w", b.h.errTimeout, d, (took - d).Round(time.Millisecond), err)}
			}
		}
		return v, b.explain(ctx, sctx, err, d)
	}
	// sctx ends go-redis' own waits (a dial, a pool wait) once the caller
	// has the reply or stopped waiting, never by the step's goroutine:
	// that would race the reply it just sent.
	sctx, cancel := context.WithTimeout(ctx, b.h.ceil)
	var callerDone <-chan struct{} // ctx's end, when sctx does not follow it
	if patient {
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), b.h.ceil)
		callerDone = ctx.Done()
	}
	linger := false
	defer func() {
		if !linger {
			cancel()
		}
	}()
	done := make(chan stepResult[T], 1)
	b.steppers.run(func() {
		v, err := attempt(sctx, b, step)
		done <- stepResult[T]{v, err}
	})
	armed := time.Now()
	begun := armed
	t := time.NewTimer(d)
	defer t.Stop()
	heardOnly := false // a budget was waited on for a heartbeat's answer alone
	dialEnded := e.Done()
	for {
		select {
		case r := <-done:
			return r.v, b.explain(ctx, sctx, r.err, d)
		case <-dialEnded:
			if cause := b.h.dialCause(e, begun); cause != nil {
				var zero T
				return zero, cause
			}
			dialEnded = nil // Redis answered meanwhile: another path's dial
		case <-callerDone:
			// The caller stops waiting; the step runs on until its reply
			// or the ceiling, and its reply still teaches the budget.
			linger = true
			time.AfterFunc(b.h.ceil, cancel)
			var zero T
			return zero, context.Cause(ctx)
		case <-sctx.Done():
			var zero T
			return zero, b.explain(ctx, sctx, context.Cause(sctx), d)
		case <-t.C:
			select {
			case r := <-done: // the reply came with the timer: take it
				return r.v, b.explain(ctx, sctx, r.err, d)
			default:
			}
			// Silent for a whole budget: down; unless this process was
			// itself too starved of CPU to judge (its timer fired late
			// by more than a quarter of the budget: replies may sit
			// unread in its sockets), or replies keep coming: slow, wait
			// on. "Silent" is judged over the budget, or over the
			// longest quiet Redis was lately seen to answer after (see
			// silenceWindow): a Redis busy in bursts.
			// A heartbeat's answer alone (no step's reply) buys one more
			// budget, not WaitTimeout: its connection may reach Redis
			// while the steps' connections are black-holed.
			// Late is measured on the clock now: the time a timer
			// sends is when it was due (Go 1.23), not when this
			// goroutine took it, so it never showed a starved process.
			late := time.Since(armed) - d
			w := b.h.silenceWindow(d)
			silent := !b.h.answering(w)
			if !silent && !b.h.stepsAnswering(w) {
				silent, heardOnly = heardOnly, true
			}
			if silent && late < d/4 {
				// The step may still get a late reply, up to WaitTimeout
				// (a new connection's dial and handshake included), which
				// would show Redis slow, not down, and teach the budget
				// its round trip; go-redis' own timeouts end it sooner
				// against a Redis that is down.
				linger = true
				time.AfterFunc(b.h.ceil, cancel)
				var zero T
				return zero, fmt.Errorf("%w (%s, no reply from Redis meanwhile): %w", b.h.errTimeout, d, context.DeadlineExceeded)
			}
			d = b.h.rto()
			armed = time.Now()
			t.Reset(d)
		}
	}
}

// Wait runs step on a goroutine of its own and waits for it until ctx
// ends, however silent Redis is meanwhile: for the breaker's probe, so
// that a Redis slower than RedisTimeout can answer it (and teach b its
// round trip) instead of being judged down forever. Silence is not
// refusal: a failed dial of the client with no step's reply since the
// wait began ends it at once with the dial's error, as it ends Run's
// (dial.go), so that the call waiting for the probe's verdict after the
// breaker's cooldown pays a refused dial, not go-redis' dials and retries.
func Wait[T any](ctx context.Context, b Budget, step func(context.Context) (T, error)) (T, error) {
	var e *dialwatch.Epoch
	var dialEnded <-chan struct{} // nil without a budget: no dial watch
	begun := time.Now()
	if b.h != nil {
		e = b.h.epoch.Load()
		dialEnded = e.Done()
	}
	done := make(chan stepResult[T], 1)
	b.steppers.run(func() {
		v, err := attempt(ctx, b, step)
		done <- stepResult[T]{v, err}
	})
	for {
		select {
		case r := <-done:
			return r.v, r.err
		case <-dialEnded:
			if cause := b.h.dialCause(e, begun); cause != nil {
				var zero T
				return zero, cause
			}
			dialEnded = nil // Redis answered meanwhile: another path's dial
		case <-ctx.Done():
			var zero T
			return zero, context.Cause(ctx)
		}
	}
}

// explain tells a step that ran out of budget (its errTimeout, which
// counts towards the breaker when Redis was silent, and is marked as load
// when it was answering) from one its caller's context ended (left as it
// is) and from Redis' own replies; a go-redis timeout while Redis answers
// is marked as load too.
func (b Budget) explain(ctx, sctx context.Context, err error, d time.Duration) error {
	if err == nil || ended(ctx) || isReply(err) { // Redis answered, even if late; or the caller's deadline
		return err
	}
	if !ended(sctx) {
		return b.h.loadFailure(err)
	}
	err = fmt.Errorf("%w (%s): %w", b.h.errTimeout, d, err)
	if b.h.answering(d) {
		return &loadError{err}
	}
	return err
}

// Bound returns ctx bounded by the budget, for waits that are not one
// command (a subscription's confirmation).
func (b Budget) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.d)
}

// Longest is the longest one step may take: RedisTimeout, or while Redis
// answers slowly the budget's ceiling (WaitTimeout); 0 with no budget.
func (b Budget) Longest() time.Duration {
	if b.h == nil {
		return b.d
	}
	return b.h.ceil
}

// Answered reports whether a step of the budget's client got a reply
// within the last d (its caches share what they observe of the client);
// false without a budget of our own.
func (b Budget) Answered(d time.Duration) bool { return b.h != nil && b.h.stepsAnswering(d) }

// Calm reports whether a step starting now has RedisTimeout as its budget:
// Redis answers within it (or there is no budget of our own).
func (b Budget) Calm() bool { return b.h == nil || b.h.rto() <= b.d }

// Heard records an answer from Redis outside the steps (the invalidation
// subscription's heartbeat) that took rtt to come. It shows Redis
// answering, whatever this process's own traffic, and it may raise the
// round trip the budget follows, never lower it: it travels on a
// connection of its own, beside the steps' queues, so it tells an idle
// replica that Redis turned slow (issue 30) without pulling a busy one's
// estimate below what its steps see. Alone (no step's reply), it buys a
// step past its budget one more budget, not WaitTimeout: its connection may
// reach Redis while the steps' are black-holed, and the breaker must still
// open. Nothing happens without a budget.
func (b Budget) Heard(rtt time.Duration) {
	if b.h != nil {
		b.h.heard(rtt)
	}
}

// Step is the budget a step starting now gets: RedisTimeout while Redis
// answers within it, more while it answers slowly; 0 without a budget.
func (b Budget) Step() time.Duration {
	if b.h == nil {
		return 0
	}
	return b.h.rto()
}

// ended reports whether ctx is done or its deadline has passed: a socket
// read that go-redis bounded by that deadline (ContextTimeoutEnabled) can
// return its i/o timeout a moment before the context's own timer fires,
// and the step was cut at its budget all the same.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
