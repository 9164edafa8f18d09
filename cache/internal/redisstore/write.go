package redisstore

// The writes outside a claim: Set and Delete take the lease away, so a
// compute in flight cannot overwrite them, and announce them on the key's
// channel and the invalidation channel.

import (
	"context"
	"fmt"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/scripts"
)

// Set stores env under k, for keepMillis, taking any lease away, and tells
// the waiters and every replica's L1.
func (s *Store) Set(ctx context.Context, k rediskey.Names, env []byte, keepMillis int64) error {
	args := []any{env, keepMillis, k.Channel(), s.cfg.InvalidationChannel, s.origin(k.Key), s.shardArg(), NotifyMaxBytes}
	if _, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (any, error) {
		return scripts.Set.Run(ctx, s.rdb, []string{k.Value, k.Lease()}, args...).Result()
	}); err != nil {
		s.h.Failed(ctx, err)
		return fmt.Errorf("cache: set %s: %w", k.Value, err)
	}
	s.reads.forget(k.Key)
	return nil
}

// Delete removes k like Set.
func (s *Store) Delete(ctx context.Context, k rediskey.Names) error {
	if _, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (any, error) {
		return scripts.Delete.Run(ctx, s.rdb, []string{k.Value, k.Lease()}, k.Channel(),
			s.cfg.InvalidationChannel, s.origin(k.Key), s.shardArg()).Result()
	}); err != nil {
		s.h.Failed(ctx, err)
		return fmt.Errorf("cache: delete %s: %w", k.Value, err)
	}
	s.reads.forget(k.Key)
	return nil
}
