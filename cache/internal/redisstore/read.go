package redisstore

// The reads: one key's GET (shared by the hit path's concurrent callers,
// of its own, or a waiter's), and many keys' in one round trip.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
)

// Reply is one GET's answer: the raw envelope, or none. A key of another
// Redis type is found with an empty envelope, which decodes as corrupt.
type Reply struct {
	Envelope string
	Found    bool
}

// Mode says which read a decision needs.
type Mode uint8

const (
	// Shared is the hit path's read: concurrent reads of one key share one
	// round trip. It needs only the cache key (rediskey.Hit).
	Shared Mode = iota
	// Own is a read of its own, for a decision that must see every write
	// that finished before it started (a lead's re-read).
	Own
	// Waiting is Own for a waiter, whose failures do not count towards
	// the breaker (Hooks.Noted); its success still closes it.
	Waiting
)

// Read returns k's envelope. A shared read (the hit path) joins a GET of
// the key already in flight: under a hot key that turns N round trips into
// one, and each caller still decodes its own copy of the value.
func (s *Store) Read(ctx context.Context, k rediskey.Names, mode Mode) (Reply, error) {
	var r Reply
	var err error
	switch mode {
	case Shared:
		r, _, err = s.reads.do(ctx, k.Key, s.getFn)
	case Own:
		r, err = s.get(ctx, k.Value)
	case Waiting:
		if r, err = s.getRaw(ctx, k.Value); err == nil {
			s.h.OK(ctx)
		} else {
			s.h.Noted(ctx, err)
		}
	}
	if err != nil {
		return Reply{}, err
	}
	if mode != Shared {
		s.reads.forget(k.Key) // this reply may answer a caller: see readGroup.forget
	}
	return r, nil
}

// ReadShared is Read(ctx, k, Shared) for the hit path, in no frame of its
// own (it is inlined): key is the cache key (k.Key). at is a reading of
// time.Now shared by the callers of the GET, later than each one's start
// (see readGroup.do); zero with an error.
func (s *Store) ReadShared(ctx context.Context, key string) (r Reply, at time.Time, err error) {
	return s.reads.do(ctx, key, s.getFn)
}

// get runs one GET, reporting Redis' health.
func (s *Store) get(ctx context.Context, valueKey string) (Reply, error) {
	r, err := s.getRaw(ctx, valueKey)
	if err != nil {
		s.h.Failed(ctx, err)
		return r, err
	}
	s.h.OK(ctx)
	return r, nil
}

// getRaw runs one GET. A key of another Redis type is a foreign entry, not a
// failure: it decodes as corrupt, and the next fill overwrites it.
func (s *Store) getRaw(ctx context.Context, valueKey string) (Reply, error) {
	v, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (string, error) {
		return s.rdb.Get(ctx, valueKey).Result()
	})
	switch {
	case err == nil:
	case errors.Is(err, redis.Nil):
		return Reply{}, nil
	case isWrongType(err):
		return Reply{Found: true}, nil
	case err != nil:
		return Reply{}, fmt.Errorf("cache: read %s: %w", valueKey, err)
	}
	return Reply{Envelope: v, Found: true}, nil
}

// isWrongType reports a WRONGTYPE reply: the key holds another Redis type.
func isWrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}

// ReadMany reads ks in one round trip and hands each key's envelope to
// each: MGET where all keys may live on one node, a pipeline of GETs on a
// Cluster. None of them is a read of the shared group's.
func (s *Store) ReadMany(ctx context.Context, ks []rediskey.Names, each func(i int, r Reply)) error {
	vkeys := make([]string, len(ks))
	for i, k := range ks {
		vkeys[i] = k.Value
	}
	give := func(i int, r Reply) {
		s.reads.forget(ks[i].Key) // not a read of the group: see readGroup.forget
		each(i, r)
	}
	fail := func(err error) error {
		s.h.Failed(ctx, err)
		return fmt.Errorf("cache: read %d keys: %w", len(ks), err)
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); !cluster {
		vals, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) ([]any, error) {
			return s.rdb.MGet(ctx, vkeys...).Result()
		})
		if err != nil {
			return fail(err)
		}
		s.h.OK(ctx)
		for i, v := range vals {
			str, ok := v.(string)
			give(i, Reply{Envelope: str, Found: ok})
		}
		return nil
	}
	cmds, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) ([]*redis.StringCmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(vkeys))
		for i, vk := range vkeys {
			cmds[i] = pipe.Get(ctx, vk)
		}
		_, err := pipe.Exec(ctx)
		if e := noReply(nil, cmds); e != nil {
			return cmds, e // the step's failure, even behind a key's nil
		}
		if errors.Is(err, redis.Nil) || isWrongType(err) {
			err = nil // per key, below
		}
		return cmds, err
	})
	if err != nil {
		return fail(err)
	}
	s.h.OK(ctx)
	for i, cmd := range cmds {
		v, err := cmd.Result()
		give(i, Reply{Envelope: v, Found: err == nil || isWrongType(err)})
	}
	return nil
}
