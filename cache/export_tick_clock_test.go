package cache

import (
	"sync"
	"time"
)

// TickClock is a test clock that moves on by its step at every reading:
// time passes between any two steps of a call, as it does on a loaded
// machine, without a test sleeping for it.
type TickClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

// NewTickClock returns a TickClock standing at the current time, still
// (step 0) until SetStep.
func NewTickClock() *TickClock { return &TickClock{t: time.Now()} }

// Now moves the clock on by its step and returns the time.
func (c *TickClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// SetStep sets how far each reading moves the clock on.
func (c *TickClock) SetStep(d time.Duration) {
	c.mu.Lock()
	c.step = d
	c.mu.Unlock()
}

// UseTickClock makes c read time from clk. Call it before c is used.
func UseTickClock[V any](c *Cache[V], clk *TickClock) { c.clock, c.realClock = clk.Now, false }
