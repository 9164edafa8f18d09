package redisstore

// The invalidation counter and the marks in Redis: their reads, the
// counter restored past the floor, an invalidation's writes and
// announcement. The marks as the process holds them are
// cache/internal/marks.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/scripts"
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

// invKey is the namespace's counter and Clear mark, {ns}:inv.
func (s *Store) invKey() string { return rediskey.Inv(s.cfg.Namespace) }

// ReadGen returns the namespace's invalidation counter: one HGET (and the
// counter restored when Redis lost it, see restored).
func (s *Store) ReadGen(ctx context.Context) (uint64, error) {
	gen, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (uint64, error) {
		return genOf(s.rdb.HGet(ctx, s.invKey(), "g"))
	})
	if err == nil {
		gen, err = s.restored(ctx, gen)
	}
	if err != nil {
		s.h.Failed(ctx, err)
		return 0, fmt.Errorf("cache: read %s: %w", s.invKey(), err)
	}
	return gen, nil
}

// restored returns gen, the counter as just read for a compute or a Set
// about to begin, or, when it is below the highest generation this process
// has seen (Redis lost data, or the read was stale), the counter restored
// past that in one more round trip: a value stamped below the marks this
// process holds would be refused by them (see internal/marks, "Across a loss of
// Redis's data"). The caller counts an error towards the breaker.
func (s *Store) restored(ctx context.Context, gen uint64) (uint64, error) {
	m := s.cfg.Marks
	floor := m.Floor()
	if gen >= floor {
		m.Saw(gen)
		return gen, nil
	}
	got, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (int64, error) {
		return scripts.Counter.Run(ctx, s.rdb, []string{s.invKey()}, floor, 0).Int64()
	})
	if err != nil {
		return 0, fmt.Errorf("cache: restore %s past %d: %w", s.invKey(), floor, err)
	}
	m.Saw(uint64(got))
	s.h.Log(ctx, slog.LevelInfo, "stampede: invalidation counter read below what this process has seen (Redis lost data, or the read crossed an invalidation); restored", "",
		fmt.Errorf("read %d, restored to %d", gen, got))
	return uint64(got), nil
}

// ReadMarks returns the marks of tags ("" is the namespace's, which Clear
// raises), in one round trip: a pipeline of HMGETs (the marks live in
// their tags' own slots; go-redis sends each node its part at once).
func (s *Store) ReadMarks(ctx context.Context, tags []string) ([]marks.Mark, error) {
	// Patient: a read its caller stopped waiting for still teaches the
	// budget the round trip, which the next read's bound follows.
	cmds, err := redisstep.RunPatient(ctx, s.budget, func(ctx context.Context) ([]*redis.SliceCmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(tags))
		for i, t := range tags {
			cmds[i] = pipe.HMGet(ctx, rediskey.Mark(s.cfg.Namespace, t), "h", "s")
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	})
	if err != nil {
		s.h.Failed(ctx, err)
		return nil, fmt.Errorf("cache: read %d invalidation marks: %w", len(tags), err)
	}
	out := make([]marks.Mark, len(tags))
	for i, cmd := range cmds {
		v := cmd.Val()
		if len(v) != 2 {
			return nil, fmt.Errorf("cache: read invalidation mark: unexpected reply %v", v)
		}
		var err1, err2 error
		out[i].Hard, err1 = parseGen(v[0])
		out[i].Soft, err2 = parseGen(v[1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Invalidate raises the counter and then the hard (or soft) mark of each
// of tags (nil: the namespace's) to its new value, announces the new marks
// to the other replicas, and returns that value. Clear is one script on
// the namespace's key; tags take two round trips: the counter moved on
// (counter.lua), then a pipeline of one mark script per tag (each in its
// tag's slot) and the announcement, and one more such pipeline per
// markBatch tags past the first markBatch. A failed batch ends the
// invalidation: the batches before it are written, it may be in part, the
// next ones are not.
func (s *Store) Invalidate(ctx context.Context, tags []string, soft bool) (uint64, error) {
	field := markField(soft)
	floor := s.cfg.Marks.Floor()
	channel := s.cfg.InvalidationChannel
	if tags == nil {
		res, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (int64, error) {
			return scripts.Clear.Run(ctx, s.rdb, []string{s.invKey()}, field, channel, "\x00"+field+" ", floor).Int64()
		})
		if err != nil {
			s.h.Failed(ctx, err)
			return 0, fmt.Errorf("cache: clear %s (its mark may be raised): %w", s.invKey(), err)
		}
		return uint64(res), nil
	}
	gen, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (int64, error) {
		return scripts.Counter.Run(ctx, s.rdb, []string{s.invKey()}, floor, 1).Int64()
	})
	if err != nil {
		s.h.Failed(ctx, err)
		return 0, fmt.Errorf("cache: invalidate: move %s on (nothing invalidated): %w", s.invKey(), err)
	}
	for done := 0; done < len(tags); done += markBatch {
		batch := tags[done:min(done+markBatch, len(tags))]
		if _, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) ([]redis.Cmder, error) {
			pipe := s.rdb.Pipeline()
			for _, t := range batch {
				scripts.Mark.Eval(ctx, pipe, []string{rediskey.Mark(s.cfg.Namespace, t)}, field, gen)
			}
			pipe.Publish(ctx, channel, marks.Announcement(batch, uint64(gen), soft))
			return pipe.Exec(ctx)
		}); err != nil {
			s.h.Failed(ctx, err)
			return 0, fmt.Errorf("cache: invalidate %d tags: the marks of the first %d raised, of the next %d maybe in part, of the last %d not: %w",
				len(tags), done, len(batch), len(tags)-done-len(batch), err)
		}
	}
	return uint64(gen), nil
}

// markBatch is how many tags' marks one round trip of an invalidation
// raises: the tags of a larger invalidation are raised in batches, one
// round trip each, bounding the pipeline and the announcement.
const markBatch = 128
