package lease

// AcquireMany: a Client's leases on many names tried once each, in one
// pipelined step where the go-redis client can pipeline.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// AcquireMany tries the leases on names once each, in one round trip where
// the client can pipeline. leases[i] is nil when names[i] is held by
// another owner (remaining[i] then says for how long) or failed (errs[i]),
// as when the reply came after the lease's validity had passed (an error
// matching [ErrLeaseLost], as [Client.Acquire]'s). It does not retry.
func (c *Client) AcquireMany(ctx context.Context, names []string, ttl time.Duration) (leases []*Lease, remaining []time.Duration, errs []error) {
	leases = make([]*Lease, len(names))
	remaining = make([]time.Duration, len(names))
	errs = make([]error, len(names))
	if err := validTTLFor(c, ttl); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return leases, remaining, errs
	}
	p, ok := c.rdb.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		for i, name := range names {
			l, err := c.Acquire(ctx, name, ttl)
			var busy *BusyError
			switch {
			case err == nil:
				leases[i] = l
			case errors.As(err, &busy):
				remaining[i] = busy.Remaining
			default:
				errs[i] = err
			}
		}
		return leases, remaining, errs
	}
	tokens := make([]string, len(names))
	asked := false
	for i, name := range names {
		if err := validName(name); err != nil {
			errs[i] = err
			continue
		}
		token, err := newToken()
		if err != nil {
			errs[i] = err
			continue
		}
		tokens[i] = token
		asked = true
	}
	if !asked {
		return leases, remaining, errs
	}
	// One step: the pipeline, within the budget. The step's goroutine
	// builds its own commands and hands back what it read.
	type reply struct {
		res []int64
		err error
	}
	sent := c.now()
	replies, err := serverStep(ctx, c.budget(ttl), c.dial, func(ctx context.Context) ([]reply, error) {
		pipe := p.Pipeline()
		cmds := make([]*redis.Cmd, len(names))
		for i, name := range names {
			if tokens[i] == "" {
				continue
			}
			key, fenceKey := Keys(name)
			// EVAL rather than EVALSHA: a pipeline cannot fall back on NOSCRIPT.
			cmds[i] = acquireScript.Eval(ctx, pipe, []string{key, fenceKey}, tokens[i], ttl.Milliseconds(), c.opts.FenceTTL.Milliseconds())
		}
		_, _ = pipe.Exec(ctx) // errors are per command
		out := make([]reply, len(cmds))
		for i, cmd := range cmds {
			if cmd != nil {
				out[i].res, out[i].err = cmd.Int64Slice()
			}
		}
		return out, nil
	})
	var late []*Lease // granted after their validity: given back, not handed out
	defer func() {
		if len(late) > 0 {
			c.giveBack(ctx, ttl, late...)
		}
	}()
	for i := range names {
		if tokens[i] == "" {
			continue
		}
		var res []int64
		stepErr := err
		if stepErr == nil {
			res, stepErr = replies[i].res, replies[i].err
		}
		switch {
		case stepErr != nil:
			errs[i] = stepError(ctx, "acquire", names[i], c.addr, stepErr)
			continue
		case len(res) != 2:
			errs[i] = fmt.Errorf("lease: acquire %q on %s: unexpected reply %v", names[i], c.addr, res)
			continue
		}
		if res[0] > 0 {
			l := newLease(c, names[i], tokens[i], res[0], ttl, sent)
			if l.remaining() <= 0 {
				late = append(late, l)
				errs[i] = lateGrant(names[i], ttl, c.drift(ttl))
				continue
			}
			leases[i] = l
		} else if res[1] > 0 {
			remaining[i] = time.Duration(res[1]) * time.Millisecond
		}
	}
	return leases, remaining, errs
}
