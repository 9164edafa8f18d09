package cache_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// What an outage costs a call before the breaker opens, and how it is
// named (issue 39, item 3; issue 41, item 2). A refused connection is an
// outage known at once: it costs (almost) no budget, and the first call
// names it ("connect: connection refused") in the cache's log, in the
// observer's event and in the errors that expose a cause; before, each of
// the first five calls waited 500 ms, and the one log line, at the
// breaker's opening, blamed a step past RedisTimeout. A Redis that accepts
// connections and never answers (a black hole) costs each call one
// RedisTimeout, not two: before, the budget before a first reply was twice
// RedisTimeout.

// redisErrors records the errors of the EventRedisError events a cache
// reports.
type redisErrors struct {
	mu   sync.Mutex
	errs []error
}

func (r *redisErrors) observer() cache.Observer {
	return cache.ObserverFunc(func(_ context.Context, e cache.Event) {
		if e.Kind == cache.EventRedisError {
			r.mu.Lock()
			r.errs = append(r.errs, e.Err)
			r.mu.Unlock()
		}
	})
}

func (r *redisErrors) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// linesWith counts the lines of logs that contain s.
func linesWith(logs, s string) int {
	n := 0
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func TestRefusedRedisCostsNoBudgetAndIsNamedAtTheFirstCall(t *testing.T) {
	const budget = time.Second // far above what a refused dial may cost
	const refused = "connection refused"
	for _, cfg := range goRedisOptionSets {
		t.Run(cfg.name, func(t *testing.T) {
			var logs syncBuf
			var obs redisErrors
			c := budgeted(t, cfg.opts(redistest.RefusingAddr(t)), cache.Options{
				RedisTimeout: budget, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observer: obs.observer(),
			})
			origin := func(context.Context) (string, error) { return "v", nil }
			for i := range 8 {
				start := time.Now()
				r, err := c.Fetch(context.Background(), fmt.Sprint("k", i), origin)
				if took := time.Since(start); took > budget/4 {
					t.Errorf("call %d took %s against a refused connection (budget %s): a refused dial is known at once", i, took, budget)
				}
				if err != nil || r.Outcome != cache.Degraded {
					t.Fatalf("call %d: %+v %v, want degraded", i, r, err)
				}
				if i == 0 {
					if n := linesWith(logs.String(), refused); n != 1 {
						t.Errorf("after the first call, %d log lines name the refused connection, want 1:\n%s", n, logs.String())
					}
					if errs := obs.all(); len(errs) == 0 || !strings.Contains(errs[0].Error(), refused) {
						t.Errorf("the first call's Redis error event: %v, want the refused dial named", errs)
					}
				}
			}
			if strings.Contains(logs.String(), "RedisTimeout (") {
				t.Errorf("the log blames the budget for a refused connection:\n%s", logs.String())
			}
			if !c.Stats().BreakerOpen {
				t.Errorf("breaker closed after 8 refused calls: %+v", c.Stats())
			}
			// With the breaker open, Get names what opened it.
			if _, _, err := c.Get(context.Background(), "k"); !errors.Is(err, cache.ErrUnavailable) || !strings.Contains(err.Error(), refused) {
				t.Errorf("Get with the breaker open: %v, want ErrUnavailable naming the refused dial", err)
			}
			start := time.Now()
			err := c.Ping(context.Background())
			if took := time.Since(start); took > budget/4 {
				t.Errorf("Ping took %s against a refused connection", took)
			}
			if !errors.Is(err, cache.ErrUnavailable) || !strings.Contains(err.Error(), refused) || strings.Contains(err.Error(), "RedisTimeout") {
				t.Errorf("Ping: %v, want ErrUnavailable naming the refused dial, not the budget", err)
			}
		})
	}
}

func TestBlackHoledRedisCostsOneBudgetPerCall(t *testing.T) {
	const budget = 400 * time.Millisecond
	for _, cfg := range clientConfigs {
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/answered_before=%v", cfg.name, warm), func(t *testing.T) {
				p := newProxy(t)
				var obs redisErrors
				c := budgeted(t, cfg.opts(p.Addr()), cache.Options{RedisTimeout: budget, Observer: obs.observer()})
				origin := func(context.Context) (string, error) { return "v", nil }
				if warm {
					if _, err := c.Fetch(context.Background(), "warm", origin); err != nil {
						t.Fatal(err)
					}
				}
				p.SetPartition(true)
				var took time.Duration
				calls := 0
				for ; calls < 10 && !c.Stats().BreakerOpen; calls++ {
					start := time.Now()
					r, err := c.Fetch(context.Background(), fmt.Sprint("k", calls), origin)
					took += time.Since(start)
					if err != nil || r.Outcome != cache.Degraded {
						t.Fatalf("call %d: %+v %v, want degraded", calls, r, err)
					}
				}
				if calls > 5 {
					t.Errorf("the breaker opened after %d calls, want 5 (BreakerThreshold)", calls)
				}
				// One budget each, with room for a loaded machine; two
				// budgets each (the old first budget) is past it.
				if limit := time.Duration(calls) * budget * 3 / 2; took > limit {
					t.Errorf("%d calls took %s against a black hole, want at most %s (one budget, %s, each)", calls, took, limit, budget)
				}
				for _, err := range obs.all() {
					if !errors.Is(err, cache.ErrRedisTimeout) || !strings.Contains(err.Error(), "("+budget.String()) {
						t.Errorf("Redis error %v, want ErrRedisTimeout after one budget (%s)", err, budget)
					}
				}
			})
		}
	}
}

// A Redis that answered and then stops (refusing connections from then
// on; its pooled connections closed): with go-redis' defaults no call pays
// for it, every step being on a goroutine that the failed dial ends; with
// ContextTimeoutEnabled the one call whose hit-path read was already
// running inline when Redis stopped may wait out its budget (see
// redisstep's dial watch), and no other.
func TestStoppedRedisCostsAtMostTheCallInFlight(t *testing.T) {
	const budget = time.Second
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			srv, err := redisserver.Start(redisserver.Options{})
			if err != nil {
				redistest.Server(t) // skips, or fails under CI
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			c := budgeted(t, cfg.opts(srv.Addr()), cache.Options{RedisTimeout: budget, BreakerThreshold: 1000})
			origin := func(context.Context) (string, error) { return "v", nil }
			for i := range 3 {
				if r, err := c.Fetch(context.Background(), fmt.Sprint("warm", i), origin); err != nil || r.Outcome != cache.Miss {
					t.Fatalf("warm call %d: %+v %v", i, r, err)
				}
			}
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			slow := 0
			for i := range 8 {
				start := time.Now()
				r, err := c.Fetch(context.Background(), fmt.Sprint("k", i), origin)
				if took := time.Since(start); took > budget/4 {
					slow++
					if took > budget*3/2 {
						t.Errorf("call %d took %s, more than its budget (%s)", i, took, budget)
					}
				}
				if err != nil || r.Outcome != cache.Degraded {
					t.Fatalf("call %d: %+v %v, want degraded", i, r, err)
				}
			}
			if want := map[bool]int{false: 0, true: 1}[cfg.name == "ContextTimeoutEnabled"]; slow > want {
				t.Errorf("%d calls paid for a Redis that refuses connections, want at most %d", slow, want)
			}
		})
	}
}

// The call that finds the breaker's cooldown over starts its probe and
// waits for the probe's verdict (so that the first call after an outage
// healed uses Redis). While Redis still refuses connections, the probe's
// PING learns so from its refused dial: that call pays for the dial, not
// for a budget (issue 39, item 3; before, it waited the whole budget, go-redis
// dialling and retrying the PING meanwhile).
func TestRefusedRedisCostsNoBudgetAfterTheCooldown(t *testing.T) {
	const budget = time.Second // far above what a refused dial may cost
	const cooldown = 50 * time.Millisecond
	for _, cfg := range goRedisOptionSets {
		t.Run(cfg.name, func(t *testing.T) {
			c := budgeted(t, cfg.opts(redistest.RefusingAddr(t)), cache.Options{RedisTimeout: budget, BreakerCooldown: cooldown})
			origin := func(context.Context) (string, error) { return "v", nil }
			for i := 0; !c.Stats().BreakerOpen; i++ {
				if i == 10 {
					t.Fatalf("breaker still closed after %d refused calls", i)
				}
				if _, err := c.Fetch(context.Background(), fmt.Sprint("k", i), origin); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 3 {
				// The cooldown is a duration of the library's to let pass,
				// not a wait for an event: each round's call is the first
				// after it, and so starts the probe and waits for it.
				time.Sleep(2 * cooldown)
				for i, call := range []func() error{
					func() error { _, err := c.Fetch(context.Background(), "f", origin); return err },
					func() error { return c.Set(context.Background(), "s", "v") },
				} {
					start := time.Now()
					err := call()
					if took := time.Since(start); took > budget/4 {
						t.Errorf("round %d, call %d after the cooldown took %s against a refused connection (budget %s): its probe's dial is refused at once", round, i, took, budget)
					}
					_ = err // degraded, or ErrUnavailable: both are right here
					if i == 0 {
						time.Sleep(2 * cooldown)
					}
				}
			}
		})
	}
}
