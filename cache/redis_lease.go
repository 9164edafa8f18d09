package cache

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/scripts"
	"github.com/stampede-go/stampede/lease"
)

// errLeaseUnanswered is the cause of a lease given up because Redis did not
// answer its extensions for a whole lease TTL.
var errLeaseUnanswered = errors.New("cache: Redis did not answer the lease's extensions for a whole lease TTL")

// keepAlive implements [store]: the claim's lease is extended every third of
// LeaseTTL while its holder computes, at most as many times as
// max(ComputeTimeout, RefreshTimeout) needs. A lost lease does not stop the
// compute: the fill's compare-and-set decides whether the value is stored.
func (s *redisStore[V]) keepAlive(ctx context.Context, cl claim[V]) func() {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		s.keep(ctx, cl, quit)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}

// keep extends cl's lease until quit, ctx's end, its loss, or the last
// extension.
func (s *redisStore[V]) keep(ctx context.Context, cl claim[V], quit <-chan struct{}) {
	o := s.c.opts
	ttl := max(o.LeaseTTL, time.Millisecond)
	interval := max(ttl/3, time.Millisecond)
	maxExtensions := int(max(o.ComputeTimeout, o.RefreshTimeout)/interval) + 2
	validUntil := time.Now().Add(ttl)
	t := time.NewTimer(interval)
	defer t.Stop()
	for n := 0; n < maxExtensions; {
		select {
		case <-quit:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		ok, err := redisstep.Run(ectx, s.p.Budget(), func(ctx context.Context) (int64, error) {
			return scripts.Extend.Run(ctx, s.p.Client(), []string{cl.k.Lease()}, cl.token, ttl.Milliseconds()).Int64()
		})
		cancel()
		switch {
		case err == nil && ok == 1:
			n++
			validUntil = sent.Add(ttl)
			s.c.observe(ctx, Event{Kind: EventLeaseExtended, Key: cl.k.Key})
		case err == nil:
			s.leaseLost(cl.k.Key, lease.ErrLeaseLost)
			return
		default:
			s.redisFailed(context.WithoutCancel(ctx), err)
			if !time.Now().Before(validUntil) {
				s.leaseLost(cl.k.Key, errors.Join(lease.ErrLeaseLost, errLeaseUnanswered, err))
				return
			}
		}
		t.Reset(min(interval, max(time.Until(validUntil), time.Millisecond)))
	}
}

// leaseLost reports a lease lost while its holder computes.
func (s *redisStore[V]) leaseLost(key string, err error) {
	ctx := context.Background()
	s.c.observe(ctx, Event{Kind: EventLeaseLost, Key: key, Err: err})
	s.c.logRare(ctx, slog.LevelWarn, "stampede: lease lost while computing; the fill's compare-and-set decides whether the value is stored", key, err)
}
