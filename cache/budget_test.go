package cache_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The Redis budget (Options.RedisTimeout) against a Redis that refuses
// connections, one that accepts them and never answers, and one 100 ms
// away each way, with go-redis' default options: before it, each of the
// first calls took 1.7 s (refused: go-redis re-dials with backoff) or 5 s
// (silent), and a caller's deadline was not honoured. The bounds below are
// the guarantees the library makes (generous where the issue gives none):
// every call within about one budget, 20 sequential calls under 2 s, 100
// concurrent calls on distinct keys under 2 s.

// perCallBound is a generous bound on one call whose one Redis step runs
// out of its 100 ms budget (the race detector and a shared 2-core machine
// add their share).
const perCallBound = 600 * time.Millisecond

// shortBudget is the budget these tests run with: the 100 ms issue 15's
// table asks for (the default is 250 ms, see Options.RedisTimeout), below
// the slow Redis' 200 ms round trip. newCache gives the rest of the suite a
// generous testRedisTimeout.
const shortBudget = 100 * time.Millisecond

// testRedisTimeout is the budget of the suite's other caches.
const testRedisTimeout = 2 * time.Second

// silentAddr returns a loopback address that accepts connections and never
// answers on them, as a hung Redis or a half-dead host does.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// clientConfigs are the two ways a budget is enforced: go-redis' defaults
// (it ignores context deadlines on socket I/O, so each step runs on a
// goroutine the caller stops waiting for) and ContextTimeoutEnabled (the
// step runs inline under a bounded context).
var clientConfigs = []struct {
	name string
	opts func(addr string) *redis.Options
}{
	{"go-redis defaults", func(addr string) *redis.Options { return &redis.Options{Addr: addr} }},
	{"ContextTimeoutEnabled", func(addr string) *redis.Options {
		return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	}},
}

// budgeted returns a cache with shortBudget (unless opts says otherwise) on
// a client of addr.
func budgeted(t *testing.T, o *redis.Options, opts cache.Options) *cache.Cache[string] {
	t.Helper()
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	if opts.RedisTimeout == 0 {
		opts.RedisTimeout = shortBudget
	}
	return newCache[string](t, rdb, opts)
}

// boundedSequence makes n sequential Fetch calls on c, over keys distinct
// keys, each of which must answer "v" within perCallBound, and all of them
// within 2 s; it returns their outcomes.
func boundedSequence(t *testing.T, c *cache.Cache[string], n, keys int) []cache.Outcome {
	t.Helper()
	origin := func(context.Context) (string, error) { return "v", nil }
	outcomes := make([]cache.Outcome, n)
	start := time.Now()
	for i := range n {
		callStart := time.Now()
		r, err := c.Fetch(context.Background(), "k"+strconv.Itoa(i%keys), origin)
		if took := time.Since(callStart); took > perCallBound {
			t.Errorf("call %d took %s (bound %s)", i, took, perCallBound)
		}
		if err != nil || r.Value != "v" {
			t.Fatalf("call %d: %+v %v", i, r, err)
		}
		outcomes[i] = r.Outcome
	}
	if took := time.Since(start); took >= 2*time.Second {
		t.Errorf("%d sequential calls took %s, want < 2s", n, took)
	}
	return outcomes
}

func TestBudgetBoundsEveryCallWhenRedisIsDown(t *testing.T) {
	for _, down := range []struct {
		name string
		addr func(*testing.T) string
	}{{"refusing", func(t *testing.T) string { return redistest.RefusingAddr(t) }}, {"silent", silentAddr}} {
		for _, cfg := range clientConfigs {
			t.Run(down.name+"/"+cfg.name, func(t *testing.T) {
				t.Parallel() // each against its own dead address; the calls mostly wait
				addr := down.addr(t)
				ctx := context.Background()
				origin := func(ctx context.Context) (string, error) { return "v", nil }

				c := budgeted(t, cfg.opts(addr), cache.Options{})
				for i, o := range boundedSequence(t, c, 20, 20) {
					if o != cache.Degraded {
						t.Fatalf("call %d: %s, want degraded", i, o)
					}
				}

				c = budgeted(t, cfg.opts(addr), cache.Options{})
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, 100)
				for i := range 100 {
					wg.Go(func() {
						r, err := c.Fetch(ctx, "c"+strconv.Itoa(i), origin)
						if err != nil || r.Value != "v" {
							errs <- fmt.Errorf("call %d: %+v %w", i, r, err)
						}
					})
				}
				wg.Wait()
				if took := time.Since(start); took >= 2*time.Second {
					t.Errorf("100 concurrent calls took %s, want < 2s", took)
				}
				close(errs)
				for err := range errs {
					t.Error(err)
				}

				// Get, Set and Delete answer within the budget too, with an
				// error: the Redis failure, or ErrUnavailable once the
				// breaker is open.
				c = budgeted(t, cfg.opts(addr), cache.Options{})
				for i := range 8 {
					callStart := time.Now()
					var err error
					switch i % 3 {
					case 0:
						_, _, err = c.Get(ctx, "k")
					case 1:
						err = c.Set(ctx, "k", "v")
					case 2:
						err = c.Delete(ctx, "k")
					}
					if took := time.Since(callStart); took > perCallBound {
						t.Errorf("direct call %d took %s", i, took)
					}
					if err == nil {
						t.Fatalf("direct call %d: no error against a Redis that is down", i)
					}
					if down.name == "silent" && !errors.Is(err, cache.ErrRedisTimeout) && !errors.Is(err, cache.ErrUnavailable) {
						t.Errorf("direct call %d: %v, want ErrRedisTimeout or ErrUnavailable", i, err)
					}
				}
			})
		}
	}
}

// The breaker's probe is a background PING within the budget: with a short
// cooldown, probes run all along a sequence of calls, and no call pays for
// one.
func TestBudgetProbeNeverHoldsACaller(t *testing.T) {
	for _, cfg := range clientConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			c := budgeted(t, cfg.opts(silentAddr(t)), cache.Options{BreakerCooldown: 5 * time.Millisecond})
			// 60 calls, of which at most BreakerThreshold pay a budget each.
			boundedSequence(t, c, 60, 7)
		})
	}
}

// slowRedis returns the address of a proxy to the package's Redis that adds
// oneWay in each direction.
func slowRedis(t *testing.T, oneWay time.Duration) string {
	t.Helper()
	p := newProxy(t)
	p.SetLatency(oneWay)
	return p.Addr()
}

// Redis that turns 100 ms away each way (a 200 ms round trip) with a 100 ms
// budget. Before issue 30 every step ran out of the budget and every call answered
// degraded, an origin call each. A slow Redis is not a down one: the first
// calls may degrade (until a first late reply shows Redis alive, a Redis
// silent for a whole budget cannot be told from a dead one), then the
// budget follows the round trip, calls answer from Redis, and the breaker
// never opens. InvalidationWait is above the round trip, so that the
// heartbeat vouches for the marks and spares each call a marks read (the
// default works too, a read per decision: TestSlowingRedisNeverDegrades).
//
// With ContextTimeoutEnabled a lone sequential caller is not covered: its
// first step runs inline and is cut at the budget with its connection,
// and each later step meets a new connection's handshake past the budget
// (see docs/operating.md); the fleet tests (slow_redis_test.go) cover that
// client with concurrent callers.
func TestBudgetBoundsEachStepAgainstASlowRedis(t *testing.T) {
	for _, cfg := range clientConfigs[:1] {
		t.Run(cfg.name, func(t *testing.T) {
			p := newProxy(t)
			c := budgeted(t, cfg.opts(p.Addr()), cache.Options{Namespace: redistest.Prefix(t), InvalidationWait: time.Second})
			origin := func(context.Context) (string, error) { return "v", nil }
			if _, err := c.Fetch(context.Background(), "warm", origin); err != nil { // Redis answered once, fast
				t.Fatal(err)
			}
			p.SetLatency(100 * time.Millisecond)
			var outcomes []cache.Outcome
			for i := range 12 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := c.Fetch(ctx, "k"+strconv.Itoa(i%6), origin)
				cancel()
				if err != nil || r.Value != "v" {
					t.Fatalf("call %d: %+v %v", i, r, err)
				}
				outcomes = append(outcomes, r.Outcome)
			}
			// Each of the first calls may meet the silence until the first
			// late reply; after that none computes locally.
			for i, o := range outcomes[4:] {
				if o == cache.Degraded {
					t.Errorf("call %d: degraded once Redis was learnt slow (outcomes %v)", 4+i, outcomes)
				}
			}
			if st := c.Stats(); st.BreakerOpen {
				t.Errorf("breaker open against a Redis that answers: %+v", st)
			}
		})
	}
}

// With a budget above the round trip the same slow Redis serves normally:
// the budget is the user's to choose.
func TestBudgetAboveTheRoundTripServes(t *testing.T) {
	addr := slowRedis(t, 20*time.Millisecond)
	c := budgeted(t, &redis.Options{Addr: addr}, cache.Options{RedisTimeout: 2 * time.Second})
	ctx := context.Background()
	for i, want := range []cache.Outcome{cache.Miss, cache.Hit} {
		r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "v", nil })
		if err != nil || r.Value != "v" || r.Outcome != want {
			t.Fatalf("call %d: %+v %v, want %s", i, r, err, want)
		}
	}
	if st := c.Stats(); st.RedisErrors != 0 {
		t.Errorf("%d Redis errors", st.RedisErrors)
	}
}

// A caller's deadline is honoured on every path against a slow Redis: the
// hit, the miss, and the wait for another replica's compute.
func TestBudgetHonoursTheCallersDeadline(t *testing.T) {
	const deadline = 50 * time.Millisecond
	ns := redistest.Prefix(t)
	// The holder talks to Redis directly; the slow replica is 100 ms away
	// each way, with a budget large enough to reach the wait.
	holder := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns})
	ctx := context.Background()
	if err := holder.Set(ctx, "hot", "v"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := holder.GetOrCompute(ctx, "held", func(context.Context) (string, error) {
			close(started)
			<-release
			return "h", nil
		})
		held <- err
	}()
	<-started
	defer func() {
		close(release)
		if err := <-held; err != nil {
			t.Error(err)
		}
	}()
	addr := slowRedis(t, 100*time.Millisecond)
	for _, cfg := range clientConfigs {
		for _, budget := range []time.Duration{shortBudget, 5 * time.Second} { // one above every step
			c := budgeted(t, cfg.opts(addr), cache.Options{Namespace: ns, RedisTimeout: budget})
			for _, key := range []string{"hot", "cold", "held"} {
				name := fmt.Sprintf("%s/budget=%s/%s", cfg.name, budget, key)
				cctx, cancel := context.WithTimeout(ctx, deadline)
				callStart := time.Now()
				r, err := c.Fetch(cctx, key, func(ctx context.Context) (string, error) { return "computed", nil })
				took := time.Since(callStart)
				cancel()
				if took > deadline+perCallBound {
					t.Errorf("%s: took %s with a %s deadline", name, took, deadline)
				}
				// Either the deadline ended the call, or the budget did and the
				// call answered degraded, before the deadline.
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %+v %v", name, r, err)
				}
			}
		}
	}
}
