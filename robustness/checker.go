package robustness

import (
	"fmt"
	"github.com/anishathalye/porcupine"
	"slices"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// Violation is one broken promise, with the operations that show it.
type Violation struct {
	Property string
	Detail   string
	Ops      []*Op `json:"-"`
	// info is porcupine's account of a register that is not linearizable.
	info *porcupine.LinearizationInfo
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Property, v.Detail)
	for _, o := range v.Ops {
		fmt.Fprintf(&b, "\n    %s", o)
	}
	return b.String()
}

// checker applies the README's promises, written as code, to a history.
type checker struct {
	sc       Scenario
	h        *History
	computes map[string]*Compute
	// revalidated lists, per value ID, the "unchanged" computes that
	// vouched for it again.
	revalidated map[string][]*Compute
	sets        map[string]*Op // Set operations by their value's ID
	// byReq is every operation by its request's ID (a compute names the
	// request it ran for).
	byReq  map[int64]*Op
	faults []fault
	// degradedIDs are the computes some caller was answered as Degraded.
	degradedIDs map[string]bool
	out         []Violation
}

// fault is the window during which a nemesis' fault may still show: from
// its injection to its healing plus settle.
type fault struct {
	from, to time.Duration
	what     string
	replica  string // the one replica it affects; "" for all
}

// Check applies every property to h and returns the violations found.
func Check(sc Scenario, h *History) []Violation {
	c := &checker{sc: sc, h: h, computes: map[string]*Compute{}, revalidated: map[string][]*Compute{}, sets: map[string]*Op{},
		byReq: map[int64]*Op{}}
	for _, cp := range h.Computes {
		c.computes[cp.ID] = cp
		if cp.How == "unchanged" && cp.Revalidated != "" {
			c.revalidated[cp.Revalidated] = append(c.revalidated[cp.Revalidated], cp)
		}
	}
	for _, o := range h.Ops {
		if o.Req.Op == wire.OpSet {
			c.sets[fmt.Sprintf("s%d", o.Req.ID)] = o
		}
		c.byReq[o.Req.ID] = o
	}
	c.faults = faultWindows(h, sc.settle())
	c.degradedIDs = map[string]bool{}
	for _, a := range c.answers() {
		if a.outcome == "degraded" {
			c.degradedIDs[a.v.ID] = true
		}
	}
	c.errors()
	c.deadlines()
	c.invalidations()
	c.writes()
	c.monotonic()
	if sc.oneCompute() {
		c.oneCompute()
	}
	c.noDegradedUnderOverload()
	c.out = append(c.out, checkRegisters(sc, h)...)
	return c.out
}

func (c *checker) fail(property string, ops []*Op, format string, args ...any) {
	c.out = append(c.out, Violation{Property: property, Detail: fmt.Sprintf(format, args...), Ops: ops})
}

// settle is how long after a fault heals its effects may still show: the
// breaker's cooldown and probe, a reconnect, a lease that ran out.
func (sc Scenario) settle() time.Duration {
	return max(sc.Options.BreakerCooldown, time.Second) + max(sc.Options.LeaseTTL, time.Second) + time.Second
}

// oneCompute says whether the run can promise one compute per key at a
// time across the fleet: no waiter gives up on a healthy holder (WaitTimeout
// exceeds every compute), so BusyCompute never runs while Redis is healthy.
func (sc Scenario) oneCompute() bool {
	return sc.Options.WaitTimeout > sc.Traffic.MaxSleep+time.Second && sc.Options.SoftTimeout == 0
}

func faultWindows(h *History, settle time.Duration) []fault {
	var out []fault
	var open *fault
	for _, e := range h.Events {
		if !e.Heal {
			f := fault{from: e.At, to: h.End + settle, what: e.What}
			for _, r := range []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"} {
				if strings.Contains(e.What, r+" ") {
					f.replica = r
				}
			}
			out = append(out, f)
			open = &out[len(out)-1]
			continue
		}
		if open != nil {
			open.to = e.At + settle
			open = nil
		}
	}
	return out
}

// faulty reports whether a fault affecting replica (any replica when "")
// overlaps [from, to].
func (c *checker) faulty(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && (f.replica == "" || replica == "" || f.replica == replica) {
			return true
		}
	}
	return false
}

// paused reports whether replica was paused or killed during [from, to].
func (c *checker) paused(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.replica == replica && f.from <= to && from <= f.to &&
			(strings.HasPrefix(f.what, "replica-pause") || strings.HasPrefix(f.what, "replica-kill")) {
			return true
		}
	}
	return false
}

// answer is one value an operation answered for one key.
type answer struct {
	op      *Op
	key     string
	v       wire.Value
	outcome string // "" when the path does not say (GetOrCompute, batch)
}

func (c *checker) answers() []answer {
	var out []answer
	for _, o := range c.h.Ops {
		if !o.Ok() {
			continue
		}
		if o.Resp.Value != nil {
			out = append(out, answer{op: o, key: o.Req.Key, v: *o.Resp.Value, outcome: outcomeOf(o)})
		}
		for k, v := range o.Resp.Values {
			out = append(out, answer{op: o, key: k, v: v})
		}
	}
	return out
}

func outcomeOf(o *Op) string {
	if o.Req.Op == wire.OpGet {
		return "get"
	}
	return o.Resp.Outcome
}

// degraded reports whether a may be a value computed while its replica
// could not reach Redis, which the README exempts from the fleet's
// guarantees on the replica that computed it, within DegradedTTL (and
// StaleIfError for a failing origin).
func (c *checker) degraded(a answer) bool {
	if a.outcome == "degraded" {
		return true
	}
	// A value some caller was answered as Degraded lives only in the
	// memory of the replica that computed it: there it stays degraded
	// whatever it answers as next (a stale stand-in for a failing compute).
	// It is kept for DegradedTTL and may stand in past it for the
	// windows a stored value has (TTL, then max(Stale, StaleIfError)):
	// no longer.
	if cp := c.computes[a.v.ID]; cp != nil && cp.Replica == a.op.Replica && c.degradedIDs[a.v.ID] &&
		a.op.Invoke <= cp.Ended+c.sc.keptFor() {
		return true
	}
	// A path that does not say (GetOrCompute, a batch), or a compute this
	// caller ran or shared: degraded if its own replica computed it while
	// a fault kept that replica from Redis.
	if (a.outcome != "" && a.outcome != "miss" && a.outcome != "shared") || a.v.Src != "compute" || c.sc.Mode == "local" {
		return false
	}
	cp := c.computes[a.v.ID]
	return cp != nil && cp.Replica == a.op.Replica && (c.degradedIDs[a.v.ID] || c.unreachable(a.op.Replica, cp.Began, a.op.Return))
}

// keptFor bounds how long after its compute a degraded value may answer on
// its replica: DegradedTTL (default min(TTL, 1s)) and the windows of a
// stored value after it.
func (sc Scenario) keptFor() time.Duration {
	o := sc.Options
	ttl := o.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	kept := o.DegradedTTL
	if kept <= 0 {
		kept = min(ttl, time.Second)
	}
	return kept + ttl + max(o.Stale, o.StaleIfError)
}

// unreachable reports whether a fault that keeps replica from Redis (not
// one that only slows it) overlaps [from, to].
func (c *checker) unreachable(replica string, from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && (f.replica == "" || f.replica == replica) && !strings.HasPrefix(f.what, "latency") {
			return true
		}
	}
	return false
}

// origin is when a's value read the source of truth, as far as the
// question "was it computed before t?" goes: the compute's begin, or the
// begin of the latest revalidation of it that began before the answer
// returned. For a Set's value, its Set's invoke.
func (c *checker) readAt(a answer) (time.Duration, bool) {
	switch a.v.Src {
	case "compute":
		cp := c.computes[a.v.ID]
		if cp == nil {
			return 0, false
		}
		t := cp.Began
		for _, r := range c.revalidated[a.v.ID] {
			if r.Began > t && r.Began < a.op.Return {
				t = r.Began
			}
		}
		return t, true
	case "set":
		s := c.sets[a.v.ID]
		if s == nil {
			return 0, false
		}
		return s.Invoke, true
	}
	return 0, false
}

// written is when a Set's value was certainly written: its Set's return.
func (c *checker) setReturned(a answer) (time.Duration, bool) {
	if a.v.Src != "set" {
		return 0, false
	}
	s := c.sets[a.v.ID]
	if s == nil || s.Unknown {
		return 0, false
	}
	return s.Return, true
}

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
			if kind, _, _ := strings.Cut(e, ": "); !slices.Contains(c.allowed(o), kind) {
				c.fail("documented errors", []*Op{o}, "%s: key %s answered %s", o.Req.Op, k, e)
			}
		}
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
	ok := []string{wire.ErrDeadline, wire.ErrOrigin, wire.ErrPanic, wire.ErrNotFound, wire.ErrInvalidated, wire.ErrFallback}
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

// invalidations: after InvalidateTags, ExpireTags or Clear returned, no
// call that began later is answered a value carrying one of its tags (any,
// for Clear) that read the origin before it began: not from Redis, L1, a
// batch, a waiter, a stale or fail-safe answer, nor a compute in flight.
// Exempt: degraded values on the replica that computed them, and, after
// ExpireTags, a stale value standing in for a failing compute. A purge by
// surrogate key (http-purge, the middleware's InvalidateTags) holds the
// same fence over the route responses tagged with one of its keys.
func (c *checker) invalidations() {
	answers := c.answers()
	for _, inv := range c.h.Ops {
		switch inv.Req.Op {
		case wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, wire.OpHTTPPurge:
		default:
			continue
		}
		if !inv.Ok() {
			continue
		}
		for _, a := range answers {
			if c.sc.Mode == "local" && a.op.Replica != inv.Replica {
				continue
			}
			// A call that began after the invalidation returned; or any
			// call answered after it returned by a load (its own or one it
			// joined) whose compute began before it: a load meets the
			// fence when it answers, however long its compute or its fill
			// took.
			if a.op.Invoke <= inv.Return && !c.loadThrough(a, inv) {
				continue
			}
			if isRouteKey(a.key) != (inv.Req.Op == wire.OpHTTPPurge) {
				continue // the middleware's entries live in a cache of their own, purged by surrogate key
			}
			if inv.Req.Op != wire.OpClear && !overlaps(a.v.Tags, inv.Req.Tags) {
				continue
			}
			if c.degraded(a) || a.v.Src == "fallback" || c.lost(inv.Invoke, a.op.Return) {
				continue // a lost mark is lost to whoever had not read it (docs/how-it-works.md)
			}
			if inv.Req.Op == wire.OpExpireTags && c.failedAfter(a, inv.Invoke) {
				continue // an expired value may stand in for a failing compute
			}
			if a.v.Src == "set" {
				if ret, ok := c.setReturned(a); !ok || ret >= inv.Invoke {
					continue
				}
			} else if at, ok := c.readAt(a); !ok || at >= inv.Invoke {
				continue
			}
			c.fail("invalidation", []*Op{inv, a.op}, "%s answered %s (%s), written before %s #%d began", a.key, a.v.ID, c.describe(a), inv.Req.Op, inv.Req.ID)
		}
	}
}

// stampSlack is how much later than the library's own decision a replica
// may stamp a call's return: a load checks its answer against the
// invalidations (servable) and then returns up the stack to the replica's
// clock read, and an invalidation may return in between. An answer
// stamped within stampSlack of the invalidation's return may have been
// decided before it, and is judged as concurrent with it.
const stampSlack = time.Millisecond

// loadThrough reports whether a was answered after inv returned by a
// compute that began before inv: one that ran through the whole
// invalidation, or a load (a miss or a shared call, the outcomes that say
// so) still in its fill.
func (c *checker) loadThrough(a answer, inv *Op) bool {
	if a.v.Src != "compute" || a.op.Return <= inv.Return+stampSlack {
		return false
	}
	cp := c.computes[a.v.ID]
	if cp == nil || cp.Began >= inv.Invoke {
		return false
	}
	return cp.Ended > inv.Return || a.outcome == "miss" || a.outcome == "shared"
}

// failedAfter reports whether a compute of a's key failed after t and
// before a returned (on a's replica in local mode), or ran past
// SoftTimeout, or, with BusyError, past WaitTimeout: the stand-ins an
// expired value may be.
func (c *checker) failedAfter(a answer, t time.Duration) bool {
	if a.op.Resp.ResultErr != "" {
		return true
	}
	// A call that shared another's stale-if-error answer does not say so:
	// look for that answer on the same replica.
	for _, o := range c.h.Ops {
		if o.Replica == a.op.Replica && o.Resp.ResultErr != "" && o.Resp.Value != nil && o.Resp.Value.ID == a.v.ID &&
			o.Invoke <= a.op.Return && a.op.Invoke <= o.Return {
			return true
		}
	}
	// A stand-in after waiting: SoftTimeout for its own compute, or
	// WaitTimeout for another replica's with BusyError.
	after := c.sc.Options.SoftTimeout
	if c.sc.Options.BusyError && (after == 0 || c.sc.Options.WaitTimeout < after) {
		after = c.sc.Options.WaitTimeout
	}
	// A load goes on after its compute ends: its fill is one more Redis
	// step, within the budget.
	fill := max(c.sc.Options.RedisTimeout, 250*time.Millisecond)
	for _, cp := range c.h.Computes {
		// Callers that joined the load share its stand-in: measure from
		// the compute's begin, not the caller's.
		ofLoad := cp.Key == a.key || cp.Req == a.op.Req.ID && len(a.op.Req.Keys) > 0
		// The load's clock starts before its compute does (the claim
		// comes first): no later than the call that started it.
		start := min(cp.Began, c.invoked(cp.Req))
		// A replica cut from Redis cannot see a load end (its lease stays
		// in Redis): to it the load goes on.
		goesOn := cp.Ended == 0 || cp.Ended+fill > a.op.Return || c.unreachable(a.op.Replica, cp.Ended, a.op.Return)
		if after > 0 && ofLoad && cp.Began < a.op.Return && goesOn && a.op.Return-start >= after {
			return true // answered while the load (its compute, then its fill) went on
		}
		// A batch's compute fails for all its keys when one key's does,
		// and the fail-safe re-arms each of them (any caller's batch).
		sameCall := cp.Key == a.key || cp.Req == a.op.Req.ID && len(a.op.Req.Keys) > 0 || c.askedFor(cp.Req, a.key)
		if sameCall && (cp.How == "failed" || cp.How == "panic" || cp.How == "cancelled") &&
			cp.Ended >= t && cp.Began <= a.op.Return && (c.sc.Mode != "local" || cp.Replica == a.op.Replica) {
			return true
		}
	}
	return false
}

func (c *checker) describe(a answer) string {
	if a.v.Src == "compute" {
		if cp := c.computes[a.v.ID]; cp != nil {
			return fmt.Sprintf("computed on %s for #%d, began %s, ended %s %s", cp.Replica, cp.Req, ms(cp.Began), ms(cp.Ended), cp.How)
		}
	}
	if s := c.sets[a.v.ID]; s != nil {
		return "set by " + s.String()
	}
	return a.v.Src
}

// isRouteKey reports whether key is one of the middleware's ("h0"…).
func isRouteKey(key string) bool { return strings.HasPrefix(key, "h") }

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// crossWindow is how long after a replica's Set or Delete returned another
// replica may still answer the value it replaced: the documented
// cross-replica read window (a GET reply or fill notification in flight;
// with L1, the invalidation's delivery, bounded by L1TTL when it is lost).
func (sc Scenario) crossWindow() time.Duration {
	w := 500 * time.Millisecond
	if sc.Options.L1Size > 0 {
		w += sc.Options.L1TTL
	}
	return w
}

// writes: after Set, Delete or Expire of a key returned, a call of that
// key that began later on the same replica (on another, later than the
// cross-replica window) is not answered a value written before the write
// began. Exempt, after Expire: the expired value standing in for a failing
// or slow compute (stale-if-error, SoftTimeout), as after ExpireTags.
func (c *checker) writes() {
	byKey := map[string][]answer{}
	for _, a := range c.answers() {
		byKey[a.key] = append(byKey[a.key], a)
	}
	for _, w := range c.h.Ops {
		if !w.Ok() || (w.Req.Op != wire.OpSet && w.Req.Op != wire.OpDelete && w.Req.Op != wire.OpExpire && w.Req.Op != wire.OpHTTPPost) {
			continue // a POST through the middleware deletes its route's entry
		}
		for _, a := range byKey[w.Req.Key] {
			begin := w.Return
			if a.op.Replica != w.Replica {
				if c.sc.Mode == "local" {
					continue
				}
				begin += c.sc.crossWindow()
			}
			if a.op.Invoke <= begin || c.degraded(a) || a.v.Src == "fallback" || a.v.ID == fmt.Sprintf("s%d", w.Req.ID) {
				continue
			}
			if c.lost(w.Invoke, a.op.Return) {
				continue // a failover or a restart without persistence may lose the write itself (docs/operating.md)
			}
			if w.Req.Op == wire.OpHTTPPost && c.unreachable(w.Replica, w.Invoke, w.Return) {
				continue // a POST's deletion that Redis failed is logged, not reported (docs/http.md)
			}
			if w.Req.Op == wire.OpExpire && c.failedAfter(a, w.Invoke) {
				continue // an expired value may stand in for a failing compute
			}
			if a.v.Src == "set" {
				if ret, ok := c.setReturned(a); !ok || ret >= w.Invoke {
					continue
				}
			} else if at, ok := c.readAt(a); !ok || at >= w.Invoke {
				continue
			}
			c.fail("write", []*Op{w, a.op}, "%s answered %s (%s), written before %s #%d began", a.key, a.v.ID, c.describe(a), w.Req.Op, w.Req.ID)
		}
	}
}

// monotonic: on one replica, a value read from the store (a hit, a wait, a
// stale answer, a Get) is never older than one read from the store by a
// call that returned before it began: stored values never go back.
func (c *checker) monotonic() {
	stored := func(a answer) bool {
		switch a.outcome {
		case "hit", "waited", "stale", "get":
			return a.v.Src == "compute"
		}
		return false
	}
	byKey := map[string][]answer{}
	for _, a := range c.answers() {
		if stored(a) {
			k := a.op.Replica + "\x00" + a.key
			byKey[k] = append(byKey[k], a)
		}
	}
	for _, as := range byKey {
		for i, a1 := range as {
			c1 := c.computes[a1.v.ID]
			for _, a2 := range as[i+1:] {
				if a1.op.Return >= a2.op.Invoke || a1.v.ID == a2.v.ID {
					continue
				}
				c2 := c.computes[a2.v.ID]
				if c1 == nil || c2 == nil || c2.Began >= c1.Began {
					continue
				}
				if c.lost(a1.op.Return, a2.op.Invoke) {
					continue
				}
				c.fail("monotonic", []*Op{a1.op, a2.op}, "%s went back from %s to %s (began %s, before %s)", a1.key, c1.ID, c2.ID, ms(c2.Began), ms(c1.Began))
			}
		}
	}
}

// lost reports whether Redis may have lost data during [from, to].
func (c *checker) lost(from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && (strings.HasPrefix(f.what, "redis-kill") && !c.sc.Persistence ||
			strings.HasPrefix(f.what, "failover") || strings.HasPrefix(f.what, "cluster-master")) {
			return true
		}
	}
	return false
}

// noDegradedUnderOverload: a slow Redis is not a down one (issue 30): no
// call answers degraded (computed locally) while Redis is only slow, from
// the overload's injection to its heal and settle.
func (c *checker) noDegradedUnderOverload() {
	for _, a := range c.answers() {
		if a.outcome == "degraded" && c.overloaded(a.op.Invoke, a.op.Return) {
			c.fail("no degraded under overload", []*Op{a.op}, "%s answered degraded (#%d [%s, %s]) while Redis was slow, not down",
				a.key, a.op.Req.ID, ms(a.op.Invoke), ms(a.op.Return))
		}
	}
}

// overloaded reports whether the overload nemesis (Redis slow past the
// budget for every replica, never down) overlaps [from, to].
func (c *checker) overloaded(from, to time.Duration) bool {
	for _, f := range c.faults {
		if f.from <= to && from <= f.to && strings.HasPrefix(f.what, "overload") {
			return true
		}
	}
	return false
}

// oneCompute: while Redis is healthy, and while it is only slow (the
// overload nemesis), one compute per key at a time across the fleet: two
// computes of a key never overlap, unless a write of the key (Set, Delete,
// an invalidation) took the first one's lease away meanwhile.
func (c *checker) oneCompute() {
	degraded := map[string]bool{}
	for _, a := range c.answers() {
		if a.outcome == "degraded" {
			degraded[a.v.ID] = true
		}
	}
	byKey := map[string][]*Compute{}
	for _, cp := range c.h.Computes {
		k := cp.Key
		if c.sc.Mode == "local" {
			k = cp.Replica + "\x00" + k
		}
		byKey[k] = append(byKey[k], cp)
	}
	for _, cps := range byKey {
		for i, a := range cps {
			for _, b := range cps[i+1:] {
				aEnd, bEnd := a.Ended, b.Ended
				if aEnd == 0 || bEnd == 0 || a.Began > bEnd || b.Began > aEnd {
					continue
				}
				// A write taking the lease away may have come before the
				// first compute of the call's claim: look from the calls'
				// invokes.
				from := min(a.Began, b.Began, c.invoked(a.Req), c.invoked(b.Req))
				// A degraded compute (Redis down) excuses the overlap, but
				// not under overload: a slow Redis is not a down one.
				excused := (degraded[a.ID] || degraded[b.ID]) && !c.overloaded(from, max(aEnd, bEnd))
				if excused || c.faulty("", from, max(aEnd, bEnd)) || c.writeDuring(a.Key, from, max(aEnd, bEnd)) {
					continue
				}
				c.fail("one compute", nil, "%s computed twice at once: %s on %s for #%d [%s, %s] and %s on %s for #%d [%s, %s]",
					a.Key, a.ID, a.Replica, a.Req, ms(a.Began), ms(aEnd), b.ID, b.Replica, b.Req, ms(b.Began), ms(bEnd))
			}
		}
	}
}

// invoked is when request id was invoked (its compute's begin is later).
func (c *checker) invoked(id int64) time.Duration {
	if o := c.byReq[id]; o != nil {
		return o.Invoke
	}
	return c.h.End
}

// askedFor reports whether request id was a batch that asked for key: a
// batch's compute that fails fails for every key it was to compute.
func (c *checker) askedFor(id int64, key string) bool {
	o := c.byReq[id]
	return o != nil && slices.Contains(o.Req.Keys, key)
}

// writeDuring reports whether a Set, Delete or invalidation of key
// overlapped [from, to].
func (c *checker) writeDuring(key string, from, to time.Duration) bool {
	for _, o := range c.h.Ops {
		end := o.Return
		if o.Unknown {
			end = c.h.End
		}
		if o.Invoke > to || end < from {
			continue
		}
		switch o.Req.Op {
		case wire.OpSet, wire.OpDelete, wire.OpExpire, wire.OpHTTPPost:
			if o.Req.Key == key {
				return true
			}
		case wire.OpInvalidateTags, wire.OpExpireTags, wire.OpClear, wire.OpHTTPPurge:
			return true
		}
	}
	return false
}
