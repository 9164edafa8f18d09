package redisstore

// The writes outside a claim: Set, Delete and Expire take the lease away,
// so a compute in flight cannot overwrite them, and announce them on the
// key's channel and the invalidation channel.

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/scripts"
)

// Set stores env under k, for keepMillis, taking any lease away, and tells
// the waiters and the L1 of every replica that tracks k.
func (s *Store) Set(ctx context.Context, k rediskey.Names, env []byte, keepMillis int64) error {
	args := []any{env, keepMillis, k.Channel(), s.shardArg(), NotifyMaxBytes}
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
			s.shardArg()).Result()
	}); err != nil {
		s.h.Failed(ctx, err)
		return fmt.Errorf("cache: delete %s: %w", k.Value, err)
	}
	s.reads.forget(k.Key)
	return nil
}

// expireTries bounds the read and compare-and-set rounds of an Expire
// racing writes to the key; past them it deletes the key.
const expireTries = 3

// Expire reads k's envelope, asks next for it with its windows ended ("":
// to be deleted), and writes that back only if the key is unchanged (a
// compare-and-set that also takes the lease away and announces like
// Delete); a key that keeps changing is deleted.
func (s *Store) Expire(ctx context.Context, k rediskey.Names, next func(cur string) string) error {
	for range expireTries {
		cur, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (string, error) {
			v, err := s.rdb.Get(ctx, k.Value).Result()
			if errors.Is(err, redis.Nil) {
				return "", nil
			}
			return v, err
		})
		if err != nil {
			s.h.Failed(ctx, err)
			return fmt.Errorf("cache: expire %s: %w", k.Value, err)
		}
		env := next(cur)
		n, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (int64, error) {
			return scripts.Expire.Run(ctx, s.rdb, []string{k.Value, k.Lease()}, cur, env, k.Channel(),
				s.shardArg()).Int64()
		})
		if err != nil {
			s.h.Failed(ctx, err)
			return fmt.Errorf("cache: expire %s: %w", k.Value, err)
		}
		if n == 1 {
			s.h.OK(ctx)
			s.reads.forget(k.Key)
			return nil
		}
	}
	return s.Delete(ctx, k) // written to again and again: expire harder
}
