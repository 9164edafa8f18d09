package robustness

// The properties of a call's own answer: no error the README does not
// document for its path, and an answer within its deadline plus the Redis
// budget.

import (
	"slices"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// errors: no caller gets an error the README does not document for its
// path.
func (c *checker) errors() {
	for _, o := range c.h.Ops {
		if o.Unknown || o.Resp.Err == "" {
			continue
		}
		if !slices.Contains(c.allowed(o), o.Resp.Err) {
			c.fail("documented errors", []*Op{o}, "%s answered %s", o.Req.Op, o.Resp.Err)
		}
		if o.Resp.Err == wire.ErrInvalidated {
			if n := c.invalidationsDuring(o); n < 2 {
				c.fail("documented errors", []*Op{o}, "ErrInvalidated with %d invalidations during its load (it takes three in a row)", n)
			}
		}
	}
	for _, o := range c.h.Ops {
		for k, e := range o.Resp.KeyErrs {
			kind, _, _ := strings.Cut(e, ": ")
			if !slices.Contains(c.allowed(o), kind) {
				c.fail("documented errors", []*Op{o}, "%s: key %s answered %s", o.Req.Op, k, e)
			}
			c.contextEnded(o, kind, "key "+k+" ")
		}
		if !o.Unknown {
			c.contextEnded(o, o.Resp.Err, "")
		}
	}
}

// contextEnded: an error that says the caller's context ended (deadline,
// canceled) comes only once it has: the replica gives each call a context
// with the request's deadline, made after the request was sent, so a call
// answered sooner than its deadline after it was sent had its context
// alive throughout. (The library's own budgets end in ErrRedisTimeout or
// ErrUnavailable, never in the caller's context error.)
func (c *checker) contextEnded(o *Op, kind, what string) {
	if kind != wire.ErrDeadline && kind != wire.ErrCanceled || o.Req.Deadline <= 0 {
		return
	}
	if took := o.Return - o.Invoke; took < o.Req.Deadline {
		c.fail("context errors", []*Op{o}, "%s: %sanswered %s after %s, its context alive until %s", o.Req.Op, what, kind, took, o.Req.Deadline)
	}
}

// allowed lists the errors the README documents for o's path.
func (c *checker) allowed(o *Op) []string {
	switch o.Req.Op {
	case wire.OpGet, wire.OpSet, wire.OpDelete, wire.OpExpire:
		return []string{wire.ErrUnavailable, wire.ErrRedisTimeout, wire.ErrDeadline}
	case wire.OpHTTPGet, wire.OpHTTPPost:
		// A failed or panicking handler is a 5xx; nothing else may be,
		// but a request whose every run was purged (a 503 that says so).
		return []string{wire.ErrDeadline, wire.ErrCanceled, wire.ErrOrigin, wire.ErrPanic, wire.ErrInvalidated}
	case wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, wire.OpHTTPPurge:
		return []string{wire.ErrUnavailable, wire.ErrDeadline}
	}
	// A caller that shares a FetchWithFallback's call gets its fallback's
	// answer, error included (documented on FetchWithFallback).
	ok := []string{wire.ErrDeadline, wire.ErrComputeTimeout, wire.ErrOrigin, wire.ErrPanic, wire.ErrNotFound, wire.ErrInvalidated, wire.ErrFallback}
	if c.sc.Options.BusyError {
		ok = append(ok, wire.ErrLeaseBusy)
	}
	return ok
}

// invalidationsDuring counts the invalidations that overlapped o's load
// (which may have begun with an earlier call of the same key on the same
// replica that o joined).
func (c *checker) invalidationsDuring(o *Op) int {
	from := o.Invoke
	for _, p := range c.h.Ops {
		if p.Replica == o.Replica && p.Invoke < from && p.Return >= o.Invoke && sharesKey(p, o) {
			from = p.Invoke
		}
	}
	// A load goes on after its first caller's deadline: one of its
	// computes still running when o began started it for an earlier call.
	for _, cp := range c.h.Computes {
		if cp.Replica == o.Replica && (cp.Key == o.Req.Key || slices.Contains(o.Req.Keys, cp.Key)) &&
			cp.Began <= o.Return && (cp.Ended == 0 || cp.Ended >= o.Invoke) {
			from = min(from, cp.Began, c.invoked(cp.Req))
		}
	}
	n := 0
	for _, i := range c.h.Ops {
		switch i.Req.Op {
		case wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, wire.OpHTTPPurge:
		default:
			continue
		}
		if i.Invoke <= o.Return && from <= i.Return && (c.sc.Mode != "local" || i.Replica == o.Replica) {
			n++
		}
	}
	return n
}

// sharesKey reports whether a and b read a key in common.
func sharesKey(a, b *Op) bool {
	ka := append([]string{a.Req.Key}, a.Req.Keys...)
	for _, k := range append([]string{b.Req.Key}, b.Req.Keys...) {
		if k != "" && slices.Contains(ka, k) {
			return true
		}
	}
	return false
}

// deadlines: every call returns within its deadline plus the Redis budget,
// unless its own process was paused or killed meanwhile.
func (c *checker) deadlines() {
	budget := max(c.sc.Options.RedisTimeout, 250*time.Millisecond)
	for _, o := range c.h.Ops {
		if c.paused(o.Replica, o.Invoke, o.Return) {
			continue
		}
		limit := o.Req.Deadline + budget + deadlineSlack
		if o.Unknown {
			c.fail("deadline", []*Op{o}, "no answer within %s past its %s deadline", answerGrace, o.Req.Deadline)
		} else if took := o.Return - o.Invoke; took > limit {
			c.fail("deadline", []*Op{o}, "took %s, deadline %s (+%s budget)", took, o.Req.Deadline, budget)
		}
	}
}

// deadlineSlack is the suite's own share of an operation's time: the pipes
// to and from the replica, and two busy cores' scheduling.
const deadlineSlack = 300 * time.Millisecond
