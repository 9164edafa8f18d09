package redisstore

// The claims and fills: a claim is the lease {ns:k}:l taken by the claim
// script, a fill the compare-and-set of the envelope against its token by
// the fill script, retried in the background on a Redis error; abandon
// gives the lease up.

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
	"github.com/stampede-go/stampede/cache/internal/retry"
	"github.com/stampede-go/stampede/cache/internal/scripts"
)

// Claimed is one key's answer to a claim attempt: won (Token is the
// lease's), held by another owner for Remaining, or failed (Err). Won or
// held, Gen is the namespace's invalidation counter read in the same step.
type Claimed struct {
	Token     string
	Won       bool
	Remaining time.Duration
	Err       error
	// Seen is the key's envelope as it was when the claim was won, when
	// Found: the lead needs no read of its own.
	Seen  string
	Found bool
	Gen   uint64
}

// ClaimMany tries to claim ks once each, in one round trip (a pipeline of
// EVALSHA of the claim script, and of EVAL for the keys whose node lacked
// the script), and hands each key's answer to each, in order: each key's
// lease is taken if it is free, and a lease won carries the key's envelope
// as it was at that moment.
func (s *Store) ClaimMany(ctx context.Context, ks []rediskey.Names, each func(i int, c Claimed)) {
	ttl := max(s.cfg.LeaseTTL.Milliseconds(), 1)
	tokens := make([]string, len(ks))
	for i := range ks {
		tokens[i] = rand.Text()
	}
	type replies struct {
		claims []*redis.Cmd
		gen    *redis.StringCmd
	}
	invKey := rediskey.Inv(s.cfg.Namespace)
	step := func(ctx context.Context) (replies, error) {
		// The namespace's invalidation counter is read in the same round
		// trip, before any compute starts: the generation of what is
		// computed (on a Cluster it lives in another slot; go-redis sends
		// each node its part).
		cmds := make([]*redis.Cmd, len(ks))
		pipe := s.rdb.Pipeline()
		for i, k := range ks {
			cmds[i] = scripts.Claim.EvalSha(ctx, pipe, []string{k.Value, k.Lease()}, tokens[i], ttl)
		}
		genCmd := pipe.HGet(ctx, invKey, "g")
		_, _ = pipe.Exec(ctx)
		if err := noReply(genCmd, cmds); err != nil {
			return replies{}, err // the step's failure, judged by its budget
		} // error replies are per command
		// A node that lacks the script took no claim: send it the script
		// itself (a Cluster's nodes may differ).
		var retry redis.Pipeliner
		for i, k := range ks {
			if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				if retry == nil {
					retry = s.rdb.Pipeline()
				}
				cmds[i] = scripts.Claim.Eval(ctx, retry, []string{k.Value, k.Lease()}, tokens[i], ttl)
			}
		}
		if retry != nil {
			_, _ = retry.Exec(ctx)
			if err := noReply(nil, cmds); err != nil {
				return replies{}, err
			}
		}
		return replies{cmds, genCmd}, nil
	}
	start := time.Now()
	rep, err := redisstep.Run(ctx, s.budget, step)
	if redisstep.UnderLoad(err) && ctx.Err() == nil && time.Since(start) < s.budget.Longest()/2 {
		// Cut under load well before the budget's ceiling (inline, at
		// RedisTimeout, on a loaded machine or a slowed link), not refused
		// and not waited out: sent again with the same tokens, on the
		// budget that backed off meanwhile, so that it waits while Redis
		// answers. A claim Redis ran the first time is the caller's own
		// (claim.lua). Its caller would otherwise take Redis's slowness
		// for an outage and compute without the fleet (issue 39 item 10).
		rep, err = redisstep.Run(ctx, s.budget, step)
	}
	var gen uint64
	var genErr error
	if err != nil {
		// Out of budget or the caller's context ended: one failure for the
		// step. A claim Redis still runs later is a lease nobody fills; it
		// expires after LeaseTTL, as a crashed holder's does.
		s.h.Failed(ctx, err)
	} else if gen, genErr = genOf(rep.gen); genErr == nil {
		gen, genErr = s.restored(ctx, gen)
	}
	for i := range ks {
		var c Claimed
		if err != nil {
			c = Claimed{Err: fmt.Errorf("cache: claim %s: %w", ks[i].Lease(), err)}
		} else {
			c = s.claimed(ctx, ks[i], tokens[i], rep.claims[i])
			if c.Won && genErr != nil { // a compute without a generation could not be checked
				s.Abandon(ctx, ks[i], c.Token)
				s.h.Failed(ctx, genErr)
				c = Claimed{Err: fmt.Errorf("cache: claim: read %s: %w", invKey, genErr)}
			}
			c.Gen = gen
		}
		each(i, c)
	}
}

// claimed reads the claim script's reply.
func (s *Store) claimed(ctx context.Context, k rediskey.Names, token string, cmd *redis.Cmd) Claimed {
	res, err := cmd.Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("cache: claim: unexpected reply %v", res)
	}
	if err != nil {
		s.h.Failed(ctx, err)
		return Claimed{Err: fmt.Errorf("cache: claim %s: %w", k.Lease(), err)}
	}
	if won, _ := res[0].(int64); won == 0 {
		ms, _ := res[1].(int64)
		return Claimed{Remaining: time.Duration(max(ms, 0)) * time.Millisecond}
	}
	c := Claimed{Token: token, Won: true}
	s.reads.forget(k.Key) // the claim read the value too
	c.Seen, c.Found = res[1].(string)
	return c
}

// Fill is one envelope to store under its claim's lease.
type Fill struct {
	K          rediskey.Names
	Token      string
	Envelope   []byte // nil: nothing to store (the fill is skipped)
	KeepMillis int64
}

// Filled says what became of one Fill: stored, fenced out (a later claim,
// Set or Delete won), or the store failed (retried in the background).
type Filled struct {
	Stored, Fenced, Failed bool
}

// FillMany stores fills under their claims, in one round trip, releases
// the claims, and hands each fill's fate to each, in order (a fill with a
// nil Envelope is skipped: nothing is sent for it and each is not called
// for it; its caller releases its claim itself): one fill
// script per entry (EVALSHA for one, a pipeline of EVAL for several: a
// pipeline cannot fall back on NOSCRIPT). A fill that fails on a Redis
// error is retried in the background (see refill) unless ctx ended.
func (s *Store) FillMany(ctx context.Context, fills []Fill, each func(i int, f Filled)) {
	args := make([][]any, len(fills))
	for i, f := range fills {
		if f.Envelope != nil {
			args[i] = s.fillArgs(f)
		}
	}
	cmds, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(fills))
		if len(fills) == 1 {
			if args[0] != nil {
				cmds[0] = scripts.Fill.Run(ctx, s.rdb, fillKeys(fills[0].K), args[0]...)
				if err := cmds[0].Err(); redisstep.NoReply(err) {
					return nil, err // the step's failure, judged by its budget
				}
			}
			return cmds, nil
		}
		pipe := s.rdb.Pipeline()
		for i, f := range fills {
			if args[i] != nil {
				cmds[i] = scripts.Fill.Eval(ctx, pipe, fillKeys(f.K), args[i]...)
			}
		}
		_, _ = pipe.Exec(ctx)
		if err := noReply(nil, cmds); err != nil {
			return nil, err // the step's failure, judged by its budget
		} // error replies are per command
		return cmds, nil
	})
	if err != nil {
		s.h.Failed(ctx, err)
	}
	for i := range fills {
		if args[i] == nil {
			continue
		}
		var f Filled
		if err == nil {
			cmd := cmds[i]
			f.Stored = s.filled(ctx, fills[i].K, cmd)
			f.Fenced = !f.Stored && cmd.Err() == nil
			if f.Stored || cmd.Err() == nil {
				each(i, f)
				continue
			}
		}
		// Redis failed or ran out of budget: the value is good, only
		// storing it failed (it may even have been stored).
		f.Failed = true
		if ctx.Err() == nil {
			s.refill(fills[i].K, args[i])
		}
		each(i, f)
	}
}

func fillKeys(k rediskey.Names) []string { return []string{k.Value, k.Lease()} }

// fillArgs are a fill's arguments to the fill script: envelope, TTL,
// token, channel, SPUBLISH flag and the largest envelope a notification
// carries.
func (s *Store) fillArgs(f Fill) []any {
	return []any{f.Envelope, f.KeepMillis, f.Token, f.K.Channel(), s.shardArg(), NotifyMaxBytes}
}

// refill retries a fill that failed on a Redis error (a failover, a
// restart) in the background, with backoff, for up to LeaseTTL+WaitTimeout:
// the replicas waiting for this value get it as soon as Redis answers
// instead of recomputing it. The compare-and-set makes a late fill safe: if
// the lease expired, or a newer lease, Set or Delete happened meanwhile, it
// is rejected.
func (s *Store) refill(k rediskey.Names, args []any) {
	s.h.Spawn("\x00fill "+k.Key, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseTTL+s.cfg.WaitTimeout)
		defer cancel()
		for attempt := 1; retry.Sleep(ctx.Done(), retry.Backoff(attempt)); attempt++ {
			cmd, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (*redis.Cmd, error) {
				cmd := scripts.Fill.Run(ctx, s.rdb, fillKeys(k), args...)
				return cmd, cmd.Err()
			})
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				switch stored := s.filled(ctx, k, cmd); {
				case stored:
					s.h.Refilled(k.Key)
				case cmd.Err() == nil:
					s.h.FencedOut(ctx, k.Key)
				}
				return
			}
			s.ReloadTopology()
		}
	})
}

// filled reads the fill script's reply, reporting a lease found in another
// holder's hands; it says whether the value was stored (false: fenced out,
// or Redis failed).
// A Redis failure counts, but the value is good: only storing it failed.
func (s *Store) filled(ctx context.Context, k rediskey.Names, cmd *redis.Cmd) bool {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("cache: fill: unexpected reply %v", res)
	}
	if err != nil {
		s.h.Failed(ctx, err)
		return false
	}
	s.h.OK(ctx)
	if res[1] == 1 {
		s.h.Rejected(ctx, k.Key)
	}
	if res[0] == 1 {
		s.reads.forget(k.Key)
	}
	return res[0] == 1
}

// Abandon releases k's lease, held with token, without a value and wakes
// the key's waiters, so that one of them takes over at once.
func (s *Store) Abandon(ctx context.Context, k rediskey.Names, token string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	n, err := redisstep.Run(actx, s.budget, func(ctx context.Context) (int64, error) {
		return scripts.Abandon.Run(ctx, s.rdb, []string{k.Lease()}, token, k.Channel(), s.shardArg()).Int64()
	})
	switch {
	case err != nil:
		s.h.Failed(actx, err)
	case n == 0:
		s.h.Rejected(ctx, k.Key)
	}
}

// noReply is the first error of first (when not nil) or of cmds (nil
// ones skipped) that is not Redis' reply: a command cut at the step's
// deadline, or whose connection broke or was refused (see
// redisstep.NoReply). A pipeline whose read failed hands that error to
// every command still unanswered, and Exec returns the first command's
// error, which may be an error reply (or a key's nil) ahead of it.
func noReply[C interface {
	redis.Cmder
	comparable
}](first redis.Cmder, cmds []C) error {
	if first != nil {
		if err := first.Err(); redisstep.NoReply(err) {
			return err
		}
	}
	var none C
	for _, c := range cmds {
		if c == none {
			continue
		}
		if err := c.Err(); redisstep.NoReply(err) {
			return err
		}
	}
	return nil
}
