package cache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/mark.lua
	markSrc    string
	markScript = redis.NewScript(markSrc)

	//go:embed scripts/clear.lua
	clearSrc    string
	clearScript = redis.NewScript(clearSrc)
)

// markField is the field of a mark hash an invalidation raises.
func markField(soft bool) string {
	if soft {
		return "s"
	}
	return "h"
}

// parseGen reads a counter or mark field: missing is 0.
func parseGen(v any) (uint64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case string:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cache: invalidation counter %q: %w", v, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("cache: invalidation counter: unexpected %T", v)
}

// genOf reads an HGET of the counter.
func genOf(cmd *redis.StringCmd) (uint64, error) {
	v, err := cmd.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return parseGen(v)
}

// readGen implements [store]: one HGET.
func (s *redisStore[V]) readGen(ctx context.Context) (uint64, error) {
	gen, err := runStep(ctx, s.budget, func(ctx context.Context) (uint64, error) {
		return genOf(s.rdb.HGet(ctx, s.c.invKey(), "g"))
	})
	if err != nil {
		s.redisFailed(ctx, err)
		return 0, fmt.Errorf("cache: read %s: %w", s.c.invKey(), err)
	}
	return gen, nil
}

// readMarks implements [store]: a pipeline of HMGETs (the marks live in
// their tags' own slots; go-redis sends each node its part at once).
func (s *redisStore[V]) readMarks(ctx context.Context, tags []string) ([]mark, error) {
	cmds, err := runStep(ctx, s.budget, func(ctx context.Context) ([]*redis.SliceCmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(tags))
		for i, t := range tags {
			cmds[i] = pipe.HMGet(ctx, s.c.markKey(t), "h", "s")
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	})
	if err != nil {
		s.redisFailed(ctx, err)
		return nil, fmt.Errorf("cache: read %d invalidation marks: %w", len(tags), err)
	}
	out := make([]mark, len(tags))
	for i, cmd := range cmds {
		v := cmd.Val()
		if len(v) != 2 {
			return nil, fmt.Errorf("cache: read invalidation mark: unexpected reply %v", v)
		}
		var err1, err2 error
		out[i].hard, err1 = parseGen(v[0])
		out[i].soft, err2 = parseGen(v[1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// invalidate implements [store]. Clear is one script on the namespace's
// key; tags take two round trips: HINCRBY of the counter, then a pipeline
// of one mark script per tag (each in its tag's slot) and the announcement.
func (s *redisStore[V]) invalidate(ctx context.Context, tags []string, soft bool) (uint64, error) {
	field := markField(soft)
	if tags == nil {
		res, err := runStep(ctx, s.budget, func(ctx context.Context) (int64, error) {
			return clearScript.Run(ctx, s.rdb, []string{s.c.invKey()}, field, s.c.invalidationChannel(), "\x00"+field+" ").Int64()
		})
		if err != nil {
			s.redisFailed(ctx, err)
			return 0, fmt.Errorf("cache: clear %s: %w", s.c.invKey(), err)
		}
		return uint64(res), nil
	}
	gen, err := runStep(ctx, s.budget, func(ctx context.Context) (int64, error) {
		return s.rdb.HIncrBy(ctx, s.c.invKey(), "g", 1).Result()
	})
	if err != nil {
		s.redisFailed(ctx, err)
		return 0, fmt.Errorf("cache: invalidate: raise %s: %w", s.c.invKey(), err)
	}
	if _, err := runStep(ctx, s.budget, func(ctx context.Context) ([]redis.Cmder, error) {
		pipe := s.rdb.Pipeline()
		for _, t := range tags {
			markScript.Eval(ctx, pipe, []string{s.c.markKey(t)}, field, gen)
		}
		pipe.Publish(ctx, s.c.invalidationChannel(), announcement(tags, uint64(gen), soft))
		return pipe.Exec(ctx)
	}); err != nil {
		s.redisFailed(ctx, err)
		return 0, fmt.Errorf("cache: invalidate %d tags: %w", len(tags), err)
	}
	return uint64(gen), nil
}
