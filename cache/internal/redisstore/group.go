package redisstore

import (
	"context"
	"sync"
	"time"
)

// readGroup shares one GET among concurrent hit-path reads of a key. Unlike
// x/sync's singleflight it allocates nothing for the callers that join a
// read in flight, which is most of them under a hot key.
//
// The GET runs detached from every caller's cancellation (others may share
// it; the client's read timeout bounds it), and each caller waits for it
// only as long as its own context allows: a slow or black-holed Redis
// cannot hold a caller past its deadline. A caller that starts a read with
// no deadline runs the GET on its own goroutine while Redis answers within
// its budget (a cancellation without a deadline is then noticed when that
// read ends, within the budget), and so does one whose deadline is at
// least within away: the GET (bounded by the longest a Redis step may
// take, within) ends before that deadline, and a cancellation is noticed
// when the GET ends; such a caller joining a GET in flight waits for it
// alone, the same way. A caller with a nearer deadline runs
// the GET on a new goroutine, which costs a goroutine hop per read, and
// stops waiting at its deadline.
type readGroup struct {
	// within bounds every GET of the group (the longest a Redis step may
	// take); 0: unbounded.
	within time.Duration
	// calm reports whether Redis answers within its budget now (nil:
	// always): only then does a caller without a deadline run the GET on
	// its own goroutine, so that its cancellation waits at most one budget.
	calm    func() bool
	mu      sync.Mutex
	flights map[string]*readFlight
}

type readFlight struct {
	done chan struct{}
	// until is when the GET ends at the latest (its start plus within,
	// plus readSlack); zero when within is.
	until time.Time
	r     Reply
	err   error
	// at is a reading of the clock (time.Now) taken once the GET was
	// answered and the flight had left the group, so that no caller could
	// join it any more: it is later than the start of every caller of the
	// GET (see do). Zero when the GET failed.
	at time.Time
}

// forget makes later reads of key start a GET of their own: the process
// has just learned of a state of key that a read already in flight may
// predate (its GET may even have been answered already, its reply held up
// on the way back). That is a write acknowledged (Set, Delete, a fill), an
// invalidation heard, or a value read by another route (a waiter's read or
// notification, a claim, a read of its own), which may already answer a
// caller: a read that starts after that caller returned must not get an
// older reply. Callers that joined the read in flight still get its reply
// (they started before).
func (g *readGroup) forget(key string) {
	g.mu.Lock()
	delete(g.flights, key)
	g.mu.Unlock()
}

// forgetAll is forget for every key: invalidations may have been missed.
func (g *readGroup) forgetAll() {
	g.mu.Lock()
	clear(g.flights)
	g.mu.Unlock()
}

// do returns the reply of get(key): one already in flight, or one started
// now; or ctx's error when ctx ends first. at is a reading of time.Now
// taken after the reply came and after the last caller joined the GET,
// the same for all its callers: a moment after each of them began and
// before it returns (zero with an error).
func (g *readGroup) do(ctx context.Context, key string, get func(context.Context, string) (Reply, error)) (r Reply, at time.Time, err error) {
	dl, bounded := ctx.Deadline()
	g.mu.Lock()
	f, ok := g.flights[key]
	if !ok {
		if g.flights == nil {
			g.flights = make(map[string]*readFlight)
		}
		f = &readFlight{done: make(chan struct{})}
		if g.within > 0 {
			f.until = time.Now().Add(g.within + readSlack)
		}
		g.flights[key] = f
		g.mu.Unlock()
		if !bounded && (g.calm == nil || g.calm()) || bounded && f.patient(dl) {
			g.run(context.WithoutCancel(ctx), key, f, get)
			return f.r, f.at, f.err
		}
		go g.run(context.WithoutCancel(ctx), key, f, get)
	} else {
		g.mu.Unlock()
	}
	// One channel to wait on is cheaper than a select.
	if ctx.Done() == nil || bounded && f.patient(dl) {
		<-f.done
		return f.r, f.at, f.err
	}
	select {
	case <-f.done:
		return f.r, f.at, f.err
	case <-ctx.Done():
		return Reply{}, time.Time{}, context.Cause(ctx)
	}
}

// readSlack is added to a GET's bound for the callers that wait for it
// alone: the budget's own clock starts a little after the flight's, and
// the reply takes a moment to reach the waiters.
const readSlack = 10 * time.Millisecond

// patient reports whether a caller with deadline dl may wait for f alone:
// f's GET ends before dl (a cancellation is then noticed when it ends). It
// reads no clock: a joiner compares dl with the GET's bound.
func (f *readFlight) patient(dl time.Time) bool {
	return !f.until.IsZero() && !dl.Before(f.until)
}

func (g *readGroup) run(ctx context.Context, key string, f *readFlight, get func(context.Context, string) (Reply, error)) {
	defer func() {
		g.mu.Lock()
		if g.flights[key] == f {
			delete(g.flights, key)
		}
		g.mu.Unlock()
		// f has left the map (here, or earlier by forget): every caller
		// that joined it looked it up before, under g.mu, so began before
		// this reading.
		if f.err == nil {
			f.at = time.Now()
		}
		close(f.done)
	}()
	f.r, f.err = get(ctx, key)
}
