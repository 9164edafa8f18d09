package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	gcache "github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"
	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/cache"
)

// strategy answers callers of R replicas; each replica has its own Redis
// client and its own in-process state, as separate processes would.
type strategy interface {
	// get answers one caller of replica r and names the outcome.
	get(ctx context.Context, r int, key string) (outcome string, err error)
	close()
}

type strategyDef struct {
	name        string
	inProcess   bool // coordinates within a process only: expect ≥ R calls per expiry
	description string
	build       func(env *runEnv) (strategy, error)
}

var strategies = []strategyDef{
	{"no-cache", false, "every caller calls the origin", newNoCache},
	{"cache-aside", true, "GET; on a miss compute and SET (no coordination)", newCacheAside},
	{"singleflight", true, "cache-aside with x/sync singleflight per process", newSingleflight},
	{"go-redis-cache", true, "github.com/go-redis/cache/v9 Once (Redis + per-process singleflight)", newGoRedisCache},
	{"sturdyc", true, "github.com/viccon/sturdyc GetOrFetch (in-process cache, per-process dedup)", newSturdyc},
	{"redislock-poll", false, "GET; on a miss take a bsm/redislock lock and compute, or poll GET every 10ms", newLockPoll},
	{"stampede-wait", false, "stampede: singleflight + Redis lease; waiters woken by the fill", newStampede(false, false)},
	{"stampede-stale", false, "stampede with a stale window: served stale while one caller refreshes", newStampede(true, false)},
	{"stampede-l1", false, "stampede wait mode with the in-process L1 tier (TTL/2)", newStampede(false, true)},
}

// runEnv is what a strategy is built on.
type runEnv struct {
	clients []*redis.Client // one per replica
	origin  *origin
	ttl     time.Duration
	prefix  string // key prefix of this run
	// staleIfError, when positive, is stampede's StaleIfError (the faults
	// scenario); the peers have no such window.
	staleIfError time.Duration
}

type noCache struct{ env *runEnv }

func newNoCache(env *runEnv) (strategy, error) { return &noCache{env}, nil }

func (s *noCache) get(ctx context.Context, _ int, key string) (string, error) {
	_, err := s.env.origin.fetch(ctx, key)
	return "origin", err
}
func (s *noCache) close() {}

type cacheAside struct{ env *runEnv }

func newCacheAside(env *runEnv) (strategy, error) { return &cacheAside{env}, nil }

func (s *cacheAside) get(ctx context.Context, r int, key string) (string, error) {
	rdb, k := s.env.clients[r], s.env.prefix+key
	if err := rdb.Get(ctx, k).Err(); err == nil {
		return "hit", nil
	} else if !errors.Is(err, redis.Nil) {
		return "", err
	}
	v, err := s.env.origin.fetch(ctx, key)
	if err != nil {
		return "", err
	}
	return "miss", rdb.Set(ctx, k, v, s.env.ttl).Err()
}
func (s *cacheAside) close() {}

type singleflightAside struct {
	env    *runEnv
	groups []singleflight.Group
}

func newSingleflight(env *runEnv) (strategy, error) {
	return &singleflightAside{env: env, groups: make([]singleflight.Group, len(env.clients))}, nil
}

func (s *singleflightAside) get(ctx context.Context, r int, key string) (string, error) {
	rdb, k := s.env.clients[r], s.env.prefix+key
	if err := rdb.Get(ctx, k).Err(); err == nil {
		return "hit", nil
	} else if !errors.Is(err, redis.Nil) {
		return "", err
	}
	_, err, shared := s.groups[r].Do(k, func() (any, error) {
		v, err := s.env.origin.fetch(ctx, key)
		if err != nil {
			return nil, err
		}
		return v, rdb.Set(ctx, k, v, s.env.ttl).Err()
	})
	if shared {
		return "shared", err
	}
	return "miss", err
}
func (s *singleflightAside) close() {}

type goRedisCache struct {
	env    *runEnv
	caches []*gcache.Cache
}

func newGoRedisCache(env *runEnv) (strategy, error) {
	s := &goRedisCache{env: env}
	for _, rdb := range env.clients {
		s.caches = append(s.caches, gcache.New(&gcache.Options{Redis: rdb}))
	}
	return s, nil
}

func (s *goRedisCache) get(ctx context.Context, r int, key string) (string, error) {
	var v []byte
	computed := false
	err := s.caches[r].Once(&gcache.Item{
		Ctx: ctx, Key: s.env.prefix + key, Value: &v, TTL: s.env.ttl,
		Do: func(it *gcache.Item) (any, error) {
			computed = true
			return s.env.origin.fetch(it.Context(), key)
		},
	})
	if computed {
		return "miss", err
	}
	return "hit-or-shared", err
}
func (s *goRedisCache) close() {}

type sturdy struct {
	env     *runEnv
	clients []*sturdyc.Client[[]byte]
}

func newSturdyc(env *runEnv) (strategy, error) {
	s := &sturdy{env: env}
	for range env.clients {
		s.clients = append(s.clients, sturdyc.New[[]byte](100_000, 10, env.ttl, 10, sturdyc.WithNoContinuousEvictions()))
	}
	return s, nil
}

func (s *sturdy) get(ctx context.Context, r int, key string) (string, error) {
	computed := false
	_, err := s.clients[r].GetOrFetch(ctx, key, func(ctx context.Context) ([]byte, error) {
		computed = true
		return s.env.origin.fetch(ctx, key)
	})
	if computed {
		return "miss", err
	}
	return "hit-or-shared", err
}
func (s *sturdy) close() {}

type lockPoll struct {
	env   *runEnv
	locks []*redislock.Client
}

func newLockPoll(env *runEnv) (strategy, error) {
	s := &lockPoll{env: env}
	for _, rdb := range env.clients {
		s.locks = append(s.locks, redislock.New(rdb))
	}
	return s, nil
}

func (s *lockPoll) get(ctx context.Context, r int, key string) (string, error) {
	rdb, k := s.env.clients[r], s.env.prefix+key
	polled := false
	for {
		if err := rdb.Get(ctx, k).Err(); err == nil {
			if polled {
				return "waited", nil
			}
			return "hit", nil
		} else if !errors.Is(err, redis.Nil) {
			return "", err
		}
		lock, err := s.locks[r].Obtain(ctx, k+":lock", 10*time.Second, nil)
		if err == nil {
			v, ferr := s.env.origin.fetch(ctx, key)
			if ferr == nil {
				ferr = rdb.Set(ctx, k, v, s.env.ttl).Err()
			}
			_ = lock.Release(context.WithoutCancel(ctx))
			return "miss", ferr
		}
		if !errors.Is(err, redislock.ErrNotObtained) {
			return "", err
		}
		polled = true
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
func (s *lockPoll) close() {}

type stampedeStrategy struct {
	env    *runEnv
	caches []*cache.Cache[[]byte]
	events eventCounts
}

// eventCounts counts the caches' events by kind: the same counters an
// operator gets from the Prometheus adapter.
type eventCounts [cache.EventUnstored + 1]atomic.Int64

// Observe counts ev, except outcomes: the recorder counts those, and one
// counter shared by every hit of every replica would put a contended
// atomic on each hit that go-redis/cache, observed by nothing, does not
// pay (the hits scenario is a like-for-like of the hit path).
func (e *eventCounts) Observe(_ context.Context, ev cache.Event) {
	if ev.Kind != cache.EventOutcome && int(ev.Kind) < len(e) {
		e[ev.Kind].Add(1)
	}
}

func (e *eventCounts) snapshot() map[string]int64 {
	m := map[string]int64{}
	for k := cache.EventOutcome; k <= cache.EventUnstored; k++ {
		if n := e[k].Load(); n > 0 {
			m[k.String()] = n
		}
	}
	return m
}

func newStampede(staleMode, l1 bool) func(env *runEnv) (strategy, error) {
	return func(env *runEnv) (strategy, error) {
		s := &stampedeStrategy{env: env}
		// The rare events the cache would log are counted by the observer
		// and reported instead.
		opts := cache.Options{Namespace: env.prefix + "stampede", TTL: env.ttl, Observer: &s.events,
			StaleIfError: env.staleIfError, Logger: slog.New(slog.DiscardHandler)}
		if staleMode {
			opts.Stale = 10 * env.ttl
		}
		if l1 {
			opts.L1Size, opts.L1TTL = 10_000, env.ttl/2
		}
		for _, rdb := range env.clients {
			c, err := cache.New[[]byte](rdb, opts)
			if err != nil {
				return nil, fmt.Errorf("stampede: %w", err)
			}
			s.caches = append(s.caches, c)
		}
		return s, nil
	}
}

func (s *stampedeStrategy) get(ctx context.Context, r int, key string) (string, error) {
	res, err := s.caches[r].Fetch(ctx, key, func(ctx context.Context) ([]byte, error) {
		return s.env.origin.fetch(ctx, key)
	})
	if err == nil && res.Outcome == cache.Stale && res.Err != nil {
		return "stale-if-error", nil // the compute failed; the stale value answered
	}
	return res.Outcome.String(), err
}

func (s *stampedeStrategy) close() {
	for _, c := range s.caches {
		_ = c.Close()
	}
}

// stats sums the caches' counters, for the report.
func (s *stampedeStrategy) stats() cache.Stats {
	var t cache.Stats
	for _, c := range s.caches {
		st := c.Stats()
		t.Computes += st.Computes
		t.Refreshes += st.Refreshes
		t.FencedOut += st.FencedOut
		t.RedisErrors += st.RedisErrors
		t.Corrupt += st.Corrupt
	}
	return t
}
