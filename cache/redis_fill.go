package cache

// The claims and fills of the Redis store: a claim is the lease {ns:k}:l
// taken by the claim script, a fill the compare-and-set of the envelope
// against its token by the fill script, retried in the background on a
// Redis error; abandon gives the lease up. The store's type, reads, writes
// and Redis health are in redis_store.go.

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/redisstore"
	"github.com/stampede-go/stampede/cache/internal/retry"
	"github.com/stampede-go/stampede/cache/internal/scripts"
)

// claimMany implements [store] with the claim script (a pipeline of
// EVALSHA, and of EVAL for the keys whose node lacked the script): each
// key's lease is taken if it is free, and a lease won
// carries the key's value as it was at that moment, so the lead needs no
// read of its own.
func (s *redisStore[V]) claimMany(ctx context.Context, ks []keys) []claimed[V] {
	out := make([]claimed[V], len(ks))
	start := time.Now()
	ttl := max(s.c.opts.LeaseTTL.Milliseconds(), 1)
	tokens := make([]string, len(ks))
	for i := range ks {
		tokens[i] = rand.Text()
	}
	type replies struct {
		claims []*redis.Cmd
		gen    *redis.StringCmd
	}
	rep, err := redisstep.Run(ctx, s.p.Budget(), func(ctx context.Context) (replies, error) {
		// The namespace's invalidation counter is read in the same round
		// trip, before any compute starts: the generation of what is
		// computed (on a Cluster it lives in another slot; go-redis sends
		// each node its part).
		cmds := make([]*redis.Cmd, len(ks))
		pipe := s.p.Client().Pipeline()
		for i, k := range ks {
			cmds[i] = scripts.Claim.EvalSha(ctx, pipe, []string{k.Value, k.Lease()}, tokens[i], ttl)
		}
		genCmd := pipe.HGet(ctx, s.c.invKey(), "g")
		if _, err := pipe.Exec(ctx); redisstep.BrokenConn(err) {
			return replies{}, err // every command met it: run the step again
		} // other errors are per command
		// A node that lacks the script took no claim: send it the script
		// itself (a Cluster's nodes may differ).
		var retry redis.Pipeliner
		for i, k := range ks {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				if retry == nil {
					retry = s.p.Client().Pipeline()
				}
				cmds[i] = scripts.Claim.Eval(ctx, retry, []string{k.Value, k.Lease()}, tokens[i], ttl)
			}
		}
		if retry != nil {
			if _, err := retry.Exec(ctx); redisstep.BrokenConn(err) {
				return replies{}, err
			}
		}
		return replies{cmds, genCmd}, nil
	})
	var gen uint64
	var genErr error
	if err != nil {
		// Out of budget or the caller's context ended: one failure for the
		// step. A claim Redis still runs later is a lease nobody fills; it
		// expires after LeaseTTL, as a crashed holder's does.
		s.redisFailed(ctx, err)
	} else if gen, genErr = genOf(rep.gen); genErr == nil {
		gen, genErr = s.restored(ctx, gen)
	}
	for i := range ks {
		if err != nil {
			out[i] = claimed[V]{err: fmt.Errorf("cache: claim %s: %w", ks[i].Lease(), err)}
		} else {
			out[i] = s.claimed(ctx, ks[i], tokens[i], rep.claims[i])
			if out[i].won && genErr != nil { // a compute without a generation could not be checked
				s.abandon(ctx, ks[i], out[i].claim)
				s.redisFailed(ctx, genErr)
				out[i] = claimed[V]{err: fmt.Errorf("cache: claim: read %s: %w", s.c.invKey(), genErr)}
			}
			out[i].claim.gen = gen
		}
		s.c.observeClaim(ctx, ks[i].Key, out[i], start)
	}
	return out
}

// claimed reads the claim script's reply.
func (s *redisStore[V]) claimed(ctx context.Context, k keys, token string, cmd *redis.Cmd) claimed[V] {
	res, err := cmd.Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("cache: claim: unexpected reply %v", res)
	}
	if err != nil {
		s.redisFailed(ctx, err)
		return claimed[V]{err: fmt.Errorf("cache: claim %s: %w", k.Lease(), err)}
	}
	if won, _ := res[0].(int64); won == 0 {
		ms, _ := res[1].(int64)
		return claimed[V]{remaining: time.Duration(max(ms, 0)) * time.Millisecond}
	}
	cl := claim[V]{k: k, token: token, reread: true}
	s.p.Forget(k.Key) // the claim read the value too
	if v, ok := res[1].(string); ok {
		cl.seen, cl.found, _ = s.c.decodeEntry(ctx, k.Key, reply{Envelope: v, Found: true}, false)
		if cl.found && !cl.seen.negative {
			cl.raw = envelopeValue(v)
		}
	}
	return claimed[V]{claim: cl, won: true}
}

// fillMany implements [store]: one fill script per entry (EVALSHA for one,
// a pipeline of EVAL for several: a pipeline cannot fall back on
// NOSCRIPT). A fill that fails on a Redis error is retried in the
// background (see refill).
func (s *redisStore[V]) fillMany(ctx context.Context, reqs []fillReq[V]) []fillResult {
	out := make([]fillResult, len(reqs))
	args := make([][]any, len(reqs))
	for i, r := range reqs {
		var err error
		if args[i], err = s.fillArgs(r); err != nil {
			out[i].unstored = err
			s.abandon(ctx, r.k, r.claim)
		}
	}
	cmds, err := redisstep.Run(ctx, s.p.Budget(), func(ctx context.Context) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(reqs))
		if len(reqs) == 1 {
			if args[0] != nil {
				cmds[0] = scripts.Fill.Run(ctx, s.p.Client(), fillKeys(reqs[0].k), args[0]...)
				if err := cmds[0].Err(); redisstep.BrokenConn(err) {
					return nil, err // run the step again
				}
			}
			return cmds, nil
		}
		pipe := s.p.Client().Pipeline()
		for i, r := range reqs {
			if args[i] != nil {
				cmds[i] = scripts.Fill.Eval(ctx, pipe, fillKeys(r.k), args[i]...)
			}
		}
		if _, err := pipe.Exec(ctx); redisstep.BrokenConn(err) {
			return nil, err // every command met it: run the step again
		} // other errors are per command
		return cmds, nil
	})
	if err != nil {
		s.redisFailed(ctx, err)
	}
	for i := range reqs {
		if args[i] == nil {
			continue
		}
		if err == nil {
			cmd := cmds[i]
			out[i].stored = s.filled(ctx, reqs[i].k, cmd)
			out[i].fenced = !out[i].stored && cmd.Err() == nil
			if out[i].stored && s.c.l1 != nil {
				env := args[i][0].([]byte)
				out[i].digest, out[i].size = s.c.l1.digestBytes(env), len(env)
			}
			if out[i].stored || cmd.Err() == nil {
				continue
			}
		}
		// Redis failed or ran out of budget: the value is good, only
		// storing it failed (it may even have been stored).
		out[i].failed = true
		if ctx.Err() == nil {
			s.refill(reqs[i].k, args[i])
		}
	}
	return out
}

func fillKeys(k keys) []string { return []string{k.Value, k.Lease()} }

// fillArgs encodes a fill for the fill script: envelope, TTL, token,
// channel, SPUBLISH flag, the largest envelope a notification carries,
// invalidation channel and message.
func (s *redisStore[V]) fillArgs(r fillReq[V]) ([]any, error) {
	b, err := s.c.encodeEntryRaw(r.e, r.raw)
	if err != nil {
		return nil, err
	}
	return []any{b, keepMillis(r.e.w, s.c.now()), r.claim.token, r.k.Channel(), s.p.ShardArg(), redisstore.NotifyMaxBytes,
		s.c.invalidationChannel(), s.c.id + " " + r.k.Key}, nil
}

// refill retries a fill that failed on a Redis error (a failover, a
// restart) in the background, with backoff, for up to LeaseTTL+WaitTimeout:
// the replicas waiting for this value get it as soon as Redis answers
// instead of recomputing it. The compare-and-set makes a late fill safe: if
// the lease expired, or a newer lease, Set or Delete happened meanwhile, it
// is rejected.
func (s *redisStore[V]) refill(k keys, args []any) {
	s.c.goBackground("\x00fill "+k.Key, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, s.c.opts.LeaseTTL+s.c.opts.WaitTimeout)
		defer cancel()
		for attempt := 1; retry.Sleep(ctx.Done(), retry.Backoff(attempt)); attempt++ {
			cmd, err := redisstep.Run(ctx, s.p.Budget(), func(ctx context.Context) (*redis.Cmd, error) {
				cmd := scripts.Fill.Run(ctx, s.p.Client(), fillKeys(k), args...)
				return cmd, cmd.Err()
			})
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				switch stored := s.filled(ctx, k, cmd); {
				case stored:
					s.c.stats.refills.Add(1)
					if s.c.l1 != nil {
						s.c.l1.invalidate(k.Key) // the announcement skips this replica
					}
				case cmd.Err() == nil:
					s.c.fencedOut(ctx, k.Key)
				}
				return
			}
			s.p.ReloadTopology()
		}
	})
}

// filled reads the fill script's reply, reporting a lease found in another
// holder's hands; it says whether the value was stored (false: fenced out,
// or Redis failed).
// A Redis failure counts, but the value is good: only storing it failed.
func (s *redisStore[V]) filled(ctx context.Context, k keys, cmd *redis.Cmd) bool {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("cache: fill: unexpected reply %v", res)
	}
	if err != nil {
		s.redisFailed(ctx, err)
		return false
	}
	s.redisOK(ctx)
	if res[1] == 1 {
		s.c.observe(ctx, Event{Kind: EventReleaseRejected, Key: k.Key})
	}
	if res[0] == 1 {
		s.p.Forget(k.Key)
	}
	return res[0] == 1
}

// abandon implements [store]: the lease is released and the waiters woken,
// so that one of them takes over at once.
func (s *redisStore[V]) abandon(ctx context.Context, k keys, cl claim[V]) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	n, err := redisstep.Run(actx, s.p.Budget(), func(ctx context.Context) (int64, error) {
		return scripts.Abandon.Run(ctx, s.p.Client(), []string{k.Lease()}, cl.token, k.Channel(), s.p.ShardArg()).Int64()
	})
	switch {
	case err != nil:
		s.redisFailed(actx, err)
	case n == 0:
		s.c.observe(ctx, Event{Kind: EventReleaseRejected, Key: k.Key})
	}
}
