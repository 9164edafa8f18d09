package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errOriginDown is what the origin answers, at once, while it is failing.
var errOriginDown = errors.New("origin: failing (injected)")

// origin is the expensive upstream every strategy protects: it sleeps for
// its latency, counts calls and tracks its peak concurrency, and remembers
// when each key was computed (so that calls can be grouped into expiries)
// and when each compute returned (so that a waiter's return can be timed
// from the fill it waited for).
type origin struct {
	latency time.Duration
	value   []byte

	calls    atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
	failing  atomic.Bool // answer errOriginDown at once, as an origin that is down

	mu    sync.Mutex
	times map[string][]time.Time

	returns sync.Map // key -> *atomic.Int64: when its latest successful compute returned (Unix ns)
}

func newOrigin(latency time.Duration, valueSize int) *origin {
	v := make([]byte, valueSize)
	for i := range v {
		v[i] = byte('a' + i%26)
	}
	return &origin{latency: latency, value: v, times: make(map[string][]time.Time)}
}

func (o *origin) fetch(ctx context.Context, key string) ([]byte, error) {
	o.calls.Add(1)
	n := o.inflight.Add(1)
	defer o.inflight.Add(-1)
	for {
		p := o.peak.Load()
		if n <= p || o.peak.CompareAndSwap(p, n) {
			break
		}
	}
	o.mu.Lock()
	o.times[key] = append(o.times[key], time.Now())
	o.mu.Unlock()
	if o.failing.Load() {
		return nil, errOriginDown
	}
	t := time.NewTimer(o.latency)
	defer t.Stop()
	select {
	case <-t.C:
		at, ok := o.returns.Load(key)
		if !ok {
			at, _ = o.returns.LoadOrStore(key, new(atomic.Int64))
		}
		at.(*atomic.Int64).Store(time.Now().UnixNano())
		return o.value, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lastReturn is when the latest successful compute of key returned (zero
// if none did).
func (o *origin) lastReturn(key string) time.Time {
	if at, ok := o.returns.Load(key); ok {
		return time.Unix(0, at.(*atomic.Int64).Load())
	}
	return time.Time{}
}

// expiries groups each key's calls into expiries: calls that start within
// window of the first call of a group recompute the same expiry (a real
// next expiry comes a whole TTL later).
func (o *origin) expiries(window time.Duration) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, ts := range o.times {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		var start time.Time
		for i, t := range ts {
			if i == 0 || t.Sub(start) >= window {
				n++
				start = t
			}
		}
	}
	return n
}
