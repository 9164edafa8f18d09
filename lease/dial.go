package lease

// A refused connection, an unknown host or a TLS handshake that fails is an
// outage known at once: the client's dial says so within a round trip. But
// go-redis hides it from the command that dialled: it dials again (5
// times, 100 ms apart, by default) and retries the command (3 times, with
// backoff), so a step that waited for it ran out of its budget and was
// reported as a silent server (ErrRedisTimeout), which it was not, and a
// Quorum paid a whole ServerTimeout per refused master. So a hook on each
// go-redis client (internal/dialwatch) tells the client's link of every failed dial
// at once, and a step of that client that is waiting, with no reply from
// the client since it began, ends with the dial's own error ("dial tcp
// 127.0.0.1:1: connect: connection refused"), at (almost) no cost. A
// black-holed server (connections accepted, nothing answers) is found by
// the budget, as before: a dial that times out is not a failure here.
//
// The hook can only be added to the concrete clients (*redis.Client, a
// Sentinel's failover client included, *redis.ClusterClient, *redis.Ring),
// once per client, whatever the number of Clients and Quorums built on it;
// another redis.Scripter keeps the budget alone. A Cluster or a Ring dials
// through a client per node, which each get the hook (see linkOf; a
// Cluster's nodes made before the lease's New do not). Their link is the
// whole client's: a failed dial of one node ends the steps of the client
// that are waiting with no reply since they began, those on other nodes
// included (the step fails as unavailable; a retry is the caller's).

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/dialwatch"
)

// link is what the steps of one go-redis client know of its dials: when a
// step last had a reply, and the current dial epoch.
type link struct {
	base      time.Time    // monotonic origin of lastReply
	lastReply atomic.Int64 // nanoseconds since base; 0: never
	// epoch ends at the client's next failed dial (see dialwatch).
	epoch atomic.Pointer[dialwatch.Epoch]
}

// links are the concrete clients' links, keyed by a weak pointer to the
// client: an entry goes when its client is collected.
var links = struct {
	sync.Mutex
	m map[any]*link
}{m: map[any]*link{}}

// linkOf returns the link of rdb, adding the dial hook to rdb the first
// time (to each node's client for a Cluster or a Ring: see
// dialwatch.Watch): nil for a Scripter the hook cannot be added to.
func linkOf(rdb redis.Scripter) *link {
	switch c := rdb.(type) {
	case *redis.Client:
		return linkFor(c, func(l *link) { dialwatch.Watch(c, l.dialFailed) })
	case *redis.ClusterClient:
		return linkFor(c, func(l *link) { dialwatch.Watch(c, l.dialFailed) })
	case *redis.Ring:
		return linkFor(c, func(l *link) { dialwatch.Watch(c, l.dialFailed) })
	}
	return nil
}

// linkFor returns c's link, making it and calling hook with it the first
// time.
func linkFor[C any](c *C, hook func(*link)) *link {
	key := weak.Make(c)
	links.Lock()
	defer links.Unlock()
	if l := links.m[key]; l != nil {
		return l
	}
	l := &link{base: time.Now()}
	l.epoch.Store(dialwatch.NewEpoch())
	links.m[key] = l
	// Once per client: every Client and Quorum on it shares the link.
	hook(l)
	runtime.AddCleanup(c, func(key weak.Pointer[C]) {
		links.Lock()
		defer links.Unlock()
		delete(links.m, key)
	}, key)
	return l
}

// dialFailed ends the current dial epoch with err as its cause: the steps
// waiting on it with no reply since they began end with err.
func (l *link) dialFailed(err error) {
	l.epoch.Swap(dialwatch.NewEpoch()).End(err)
}

// replied records that a step of the client had a reply (the server
// answered, maybe with an error reply).
func (l *link) replied() {
	l.lastReply.Store(int64(time.Since(l.base)))
}

// dialCause is the failed dial that ended e while a step begun at start
// waited, with no step's reply since: the step's outcome. Nil otherwise.
func (l *link) dialCause(e *dialwatch.Epoch, start time.Time) error {
	if !e.Ended() {
		return nil
	}
	if last := l.lastReply.Load(); last != 0 && last >= int64(start.Sub(l.base)) {
		return nil
	}
	return e.Cause()
}

// watched runs call on a goroutine of its own and waits for it while ctx
// lasts; when a dial of l's client fails meanwhile, with no reply of the
// client since call began, it returns at once with the dial's error (call
// goes on to its own end, and what it returns then is dropped, but its
// reply is still recorded). When ctx ends first it returns ctx's cause.
// With l nil (a Scripter without the hook) only ctx can end the wait.
func watched[T any](ctx context.Context, l *link, call func(context.Context) (T, error)) (T, error) {
	var dialEnded <-chan struct{}
	var e *dialwatch.Epoch
	start := time.Now()
	if l != nil {
		e = l.epoch.Load()
		dialEnded = e.Done()
	}
	done := make(chan stepResult[T], 1) // buffered: a late step never blocks
	go func() {
		v, err := call(ctx)
		if l != nil && (err == nil || isReply(err)) {
			l.replied()
		}
		done <- stepResult[T]{v, err}
	}()
	var zero T
	for {
		select {
		case r := <-done:
			return r.v, r.err
		case <-dialEnded:
			if cause := l.dialCause(e, start); cause != nil {
				select {
				case r := <-done: // the reply came with the failed dial: take it
					return r.v, r.err
				default:
				}
				return zero, cause
			}
			dialEnded = nil // a reply came meanwhile: another path's dial
		case <-ctx.Done():
			select {
			case r := <-done: // the reply came with the deadline: take it
				return r.v, r.err
			default:
			}
			return zero, context.Cause(ctx)
		}
	}
}
