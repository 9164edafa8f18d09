package redisstore

// A claim's lease kept alive while its holder computes.

import (
	"context"
	"sync"
	"time"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/scripts"
)

// KeepAlive extends k's lease, held with token, every third of LeaseTTL
// while its holder computes, at most as many times as KeepFor needs, until
// stop. A lost lease does not stop the compute (Hooks.LeaseLost reports
// it): the fill's compare-and-set decides whether the value is stored.
func (s *Store) KeepAlive(ctx context.Context, k rediskey.Names, token string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		s.keep(ctx, k, token, quit)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
		})
	}
}

// keep extends the lease until quit, ctx's end, its loss, or the last
// extension.
func (s *Store) keep(ctx context.Context, k rediskey.Names, token string, quit <-chan struct{}) {
	ttl := max(s.cfg.LeaseTTL, time.Millisecond)
	interval := max(ttl/3, time.Millisecond)
	maxExtensions := int(s.cfg.KeepFor/interval) + 2
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
		ok, err := redisstep.Run(ectx, s.budget, func(ctx context.Context) (int64, error) {
			return scripts.Extend.Run(ctx, s.rdb, []string{k.Lease()}, token, ttl.Milliseconds()).Int64()
		})
		cancel()
		switch {
		case err == nil && ok == 1:
			n++
			validUntil = sent.Add(ttl)
			s.h.Extended(ctx, k.Key)
		case err == nil:
			s.h.LeaseLost(k.Key, nil)
			return
		default:
			s.h.Failed(context.WithoutCancel(ctx), err)
			if !time.Now().Before(validUntil) {
				s.h.LeaseLost(k.Key, err)
				return
			}
		}
		t.Reset(min(interval, max(time.Until(validUntil), time.Millisecond)))
	}
}
