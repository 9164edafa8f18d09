package cache

import (
	"context"
	"sync"
)

// readGroup shares one GET among concurrent hit-path lookups of a key.
// Unlike x/sync's singleflight it allocates nothing for the callers that
// join a read in flight, which is most of them under a hot key.
type readGroup struct {
	mu      sync.Mutex
	flights map[string]*readFlight
}

type readFlight struct {
	done chan struct{}
	r    reply
	err  error
}

// do returns the reply of a GET of key's envelope: one already in flight, or
// one that get runs now (detached from ctx's cancellation, since others may
// share it; the client's read timeout bounds it).
func (g *readGroup) do(ctx context.Context, key string, get func(context.Context) (reply, error)) (reply, error) {
	g.mu.Lock()
	if f, ok := g.flights[key]; ok {
		g.mu.Unlock()
		<-f.done
		return f.r, f.err
	}
	if g.flights == nil {
		g.flights = make(map[string]*readFlight)
	}
	f := &readFlight{done: make(chan struct{})}
	g.flights[key] = f
	g.mu.Unlock()

	defer func() {
		g.mu.Lock()
		delete(g.flights, key)
		g.mu.Unlock()
		close(f.done)
	}()
	f.r, f.err = get(context.WithoutCancel(ctx))
	return f.r, f.err
}
