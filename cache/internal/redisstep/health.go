package redisstep

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/dialwatch"
)

// errRedisLoad marks a Redis step that ran out of its budget, or timed out
// in go-redis, while Redis kept answering other steps: Redis is slow (busy,
// distant, or this replica is CPU-starved), not down. Such a failure never
// counts towards the breaker, and a caller that meets it keeps the fleet
// protocol instead of computing locally (see [redisHealth] and [UnderLoad]).
var errRedisLoad = errors.New("cache: Redis answering, but slowly: load, not an outage")

// redisHealth tells a slow Redis from a down one, for one client: when a
// reply last arrived (on any connection, for any step, including the late
// replies of steps whose callers stopped waiting), and the smoothed round
// trip of the steps and its mean deviation (RFC 6298's estimator, as TCP's
// retransmission timer uses, except that the smoothed round trip follows a
// rise with a gain of 1/2 instead of 1/8). A step's budget follows it:
//
//	rto = clamp(srtt + max(4·rttvar, srtt), RedisTimeout, WaitTimeout)
//
// A step past its budget is an outage only when no reply at all arrived in
// the last rto (Redis silent); otherwise it is load, and the step is waited
// for, rto after rto, as long as replies keep arriving, up to WaitTimeout
// and the caller's deadline. Refused and reset connections and failed dials
// are outages whatever the replies.
//
// What is observed is the client's: every cache on one go-redis client
// shares it (a cache with sparse traffic, the HTTP middleware's beside a
// busy one, learns from the busy one's replies); the bounds are each
// cache's own.
type redisHealth struct {
	floor, ceil time.Duration
	// errTimeout is what a step past its budget matches: the cache's
	// public sentinel (cache.ErrRedisTimeout), handed in by the cache.
	errTimeout error
	*link
}

// link is what the caches of one client observe of Redis.
type link struct {
	base      time.Time    // monotonic origin of lastReply
	lastReply atomic.Int64 // nanoseconds since base; 0: never
	// lastHeard is lastReply for the answers heard outside the steps (the
	// heartbeat's, on a connection of its own): they show Redis alive, not
	// that the steps' connections reach it.
	lastHeard atomic.Int64
	srtt      atomic.Int64 // nanoseconds; 0: no sample yet
	rttvar    atomic.Int64
	// slowRTT is the longest round trip past RedisTimeout of the replies
	// that came since slow ones began to arrive, and slowAt (as lastReply)
	// when the last of them came: how long Redis was lately seen to stay
	// quiet and answer after all (see silenceWindow).
	slowRTT atomic.Int64
	slowAt  atomic.Int64
	// cut: an inline step was cut at its budget with Redis silent; steps
	// run on goroutines (which can outlive their budget and learn the
	// round trip from a late reply) until a reply within the budget.
	cut atomic.Bool
	// epoch ends at the client's next failed dial (see dialwatch);
	// lastDialFail is when the last one failed (as lastReply).
	epoch        atomic.Pointer[dialwatch.Epoch]
	lastDialFail atomic.Int64
	refs         int // caches using it, under links' lock
}

// links are the clients' links, while a cache uses them.
var links = struct {
	sync.Mutex
	m map[redis.UniversalClient]*link
}{m: map[redis.UniversalClient]*link{}}

// newRedisHealth returns rdb's health with a cache's bounds and its
// sentinel for a step past its budget; release it when the cache closes.
func newRedisHealth(floor, ceil time.Duration, rdb redis.UniversalClient, errTimeout error) *redisHealth {
	links.Lock()
	defer links.Unlock()
	l := links.m[rdb]
	if l == nil {
		l = &link{base: time.Now()}
		l.epoch.Store(dialwatch.NewEpoch())
		links.m[rdb] = l
		// Once per link: a client whose caches all closed and that gets a
		// new one carries the old link's hook too, which tells a link no
		// step waits on.
		dialwatch.Watch(rdb, l.dialFailed)
	}
	l.refs++
	return &redisHealth{floor: floor, ceil: max(ceil, floor), errTimeout: errTimeout, link: l}
}

// release drops a cache's use of rdb's link.
func (h *redisHealth) release(rdb redis.UniversalClient) {
	links.Lock()
	defer links.Unlock()
	if l := links.m[rdb]; l == h.link {
		if l.refs--; l.refs <= 0 {
			delete(links.m, rdb)
		}
	}
}

// replied records a reply that took rtt to come.
func (h *redisHealth) replied(rtt time.Duration) {
	now := int64(time.Since(h.base))
	h.lastReply.Store(now)
	if rtt > h.floor { // a slow reply: never on a hit path that Redis answers in time
		if int64(rtt) > h.slowRTT.Load() || now-h.slowAt.Load() > int64(h.ceil) {
			h.slowRTT.Store(int64(rtt))
		}
		h.slowAt.Store(now)
	}
	if rtt < h.floor && h.cut.Load() {
		h.cut.Store(false)
	}
	h.sample(rtt)
}

// heard records an answer from Redis outside the steps (see Budget.Heard):
// a reply, and a sample only when it is above the smoothed round trip.
func (h *redisHealth) heard(rtt time.Duration) {
	h.lastHeard.Store(int64(time.Since(h.base)))
	if int64(rtt) > h.srtt.Load() {
		h.sample(rtt)
	}
}

// sample feeds one round trip (or, for a step cut at its deadline, the
// time it had run: a lower bound, which makes the budget back off) to the
// estimator. Concurrent samples may overwrite each other: an estimate
// needs no exactness.
func (h *redisHealth) sample(rtt time.Duration) {
	r := int64(max(rtt, 0))
	s := h.srtt.Load()
	if s == 0 {
		h.srtt.Store(max(r, 1))
		h.rttvar.Store(r / 2)
		return
	}
	d := s - r
	if d < 0 {
		d = -d
	}
	v := h.rttvar.Load()
	h.rttvar.Store(v - v/4 + d/4)
	if r > s {
		// Fast up, slow down: a Redis turning slow must raise the budget
		// within a sample or two, before a budget without replies (a
		// sparse caller's) is taken for silence.
		h.srtt.Store(s + (r-s)/2)
		return
	}
	h.srtt.Store(max(s-s/8+r/8, 1))
}

// rto is the budget of a step starting now: the smoothed round trip plus
// four deviations, and at least twice the smoothed round trip (callers in
// step with each other see no reply for a whole round trip, and a spike
// of twice the usual is load, not silence), within [floor, ceil].
func (h *redisHealth) rto() time.Duration {
	s := h.srtt.Load()
	if s == 0 {
		// No reply yet: the floor. A budget twice as long (as TCP's
		// first RTO is conservative, RFC 6298, 2.1) made every call of
		// an outage that began before the first reply (a wrong address,
		// Redis down at start-up) cost two budgets; a fleet's cold start
		// whose first replies come later than RedisTimeout degrades its
		// first callers once instead (their silences count once towards
		// the breaker, see Breaker.Silence), and their late replies teach
		// the budget the round trip.
		return h.floor
	}
	return min(max(h.expect(), h.floor), h.ceil)
}

// expect is rto's estimate before its floor, within its ceiling; 0 before
// a first reply.
func (h *redisHealth) expect() time.Duration {
	s := h.srtt.Load()
	return min(time.Duration(s+max(4*h.rttvar.Load(), s)), h.ceil)
}

// answering reports whether a reply arrived within the last window, to a
// step or heard outside them.
func (h *redisHealth) answering(window time.Duration) bool {
	return h.stepsAnswering(window) || within(h.base, h.lastHeard.Load(), window)
}

// silenceWindow is how long a step waiting with budget d may hear nothing
// from Redis before Redis is judged silent: d, or twice the longest round
// trip past RedisTimeout of the slow replies that kept coming until less
// than WaitTimeout ago (within WaitTimeout), when longer. Redis busy in
// bursts (a slow script, a save, a saturated core) answers a queue of
// steps at once, then nothing for a whole burst; the quick replies between
// bursts lower the budget (the estimate follows the common round trip)
// below a burst that Redis has just been seen to come out of: that quiet
// is load, not an outage. Twice, as the budget is at least twice the
// smoothed round trip: the quiet a client sees spans a burst and the
// moments around it (measured: a 153 ms reply, then 155 ms of quiet). A
// Redis that goes silent for good costs that longer window only to the
// steps already waiting when it went quiet, and only until WaitTimeout has
// passed since its last slow reply.
func (h *redisHealth) silenceWindow(d time.Duration) time.Duration {
	at := h.slowAt.Load()
	if at == 0 || int64(time.Since(h.base))-at > int64(h.ceil) {
		return d
	}
	return max(d, min(2*time.Duration(h.slowRTT.Load()), h.ceil))
}

// stepsAnswering reports whether a step's reply arrived within the last
// window.
func (h *redisHealth) stepsAnswering(window time.Duration) bool {
	return within(h.base, h.lastReply.Load(), window)
}

// within reports whether last (nanoseconds since base; 0: never) is less
// than window ago.
func within(base time.Time, last int64, window time.Duration) bool {
	return last != 0 && int64(time.Since(base))-last < int64(window)
}

// isReply reports whether err (nil included) means Redis answered the step.
func isReply(err error) bool {
	if err == nil || err == redis.Nil {
		return true
	}
	var reply redis.Error
	return errors.As(err, &reply)
}

// loadFailure classifies a failed step's error: it returns err marked with
// errRedisLoad when it is a timeout (the budget's, go-redis' read timeout,
// a wait for a pooled connection) while Redis is answering, and err as it
// is otherwise (an outage, a reply, or the caller's context).
func (h *redisHealth) loadFailure(err error) error {
	if err == nil || errors.Is(err, errRedisLoad) || isReply(err) || !timeoutErr(err) {
		return err
	}
	if !h.answering(h.rto()) {
		return err
	}
	return &loadError{err}
}

// timeoutErr reports whether err is go-redis' timeout on an established
// path to Redis: a read or write timeout, or a wait for a pooled
// connection (not a refused, reset or failed dial: those are outages).
func timeoutErr(err error) bool {
	if dialErr(err) {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dialErr reports whether err came from dialling Redis.
func dialErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// loadError is a step's failure under load: it matches errRedisLoad and
// everything the underlying error matches (the budget's errTimeout
// included).
type loadError struct{ err error }

func (e *loadError) Error() string { return e.err.Error() + " (" + errRedisLoad.Error() + ")" }
func (e *loadError) Unwrap() []error {
	return []error{errRedisLoad, e.err}
}

// UnderLoad reports whether err is a Redis failure under load (see
// errRedisLoad), after which a caller must not compute locally.
func UnderLoad(err error) bool { return errors.Is(err, errRedisLoad) }
