package robustness

// The checker: Check applies every property to a history and collects the
// violations, and the reading of a history they share (the answers, what a
// value read and when, whether it is degraded). The properties are in
// checker_*.go, the registers' linearizability in linearizable.go.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

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
	cov         Coverage
	// regroupedMemo and surelyRegroupedMemo: regroupedRun's and
	// surelyRegrouped's answers by compute ID.
	regroupedMemo, surelyRegroupedMemo map[string]bool
}

// Coverage says how much of a history the core promise was judged on:
// two computes of a key that overlap in time are judged (a violation of
// one compute per key) unless a fault or a write excuses them.
type Coverage struct {
	Overlaps, Excused int
	// Judged is the share of the run during which no fault excuses an
	// overlap of any two replicas' computes (see checker.broken): there,
	// every overlap is a violation.
	Judged float64
	// Recomputes counts the computes that began while a value of their
	// key was certainly stored and fresh (see servedNotRecomputed), and
	// RecomputesExcused those of them that a write, an invalidation, a
	// cached not-found or a fault on the caller's replica excused: every
	// other one is a violation.
	Recomputes, RecomputesExcused int
	// Unselected counts the requests of the joiners' route (opJoin) that
	// joined a run of another principal's request and were answered by a
	// handler run of their variant's (see checker.regroupedRun) or their
	// own (a bypass): each would have been a violation of selected had the
	// run's response answered it.
	Unselected int
}

// Check applies every property to h and returns the violations found.
func Check(sc Scenario, h *History) []Violation {
	vs, _ := CheckCoverage(sc, h)
	return vs
}

// CheckCoverage is Check, with what the core promise was judged on.
func CheckCoverage(sc Scenario, h *History) ([]Violation, Coverage) {
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
	c.noCrash()
	c.errors()
	c.deadlines()
	c.invalidations()
	c.writes()
	c.monotonic()
	c.freshness()
	c.servedNotRecomputed()
	if sc.oneCompute() {
		c.oneCompute()
	}
	c.noDegradedUnderOverload()
	c.noDegradedWhileReachable()
	c.refusedOutageCost()
	c.selected()
	c.out = append(c.out, checkRegisters(sc, h)...)
	c.cov.Judged = c.judgedShare()
	return c.out, c.cov
}

// noCrash: no replica process exits by itself (a panic in the library
// kills it: a caller's fn's panic must reach the caller as a PanicError).
func (c *checker) noCrash() {
	for _, crash := range c.h.Crashes {
		c.fail("no crash", nil, "%s", crash)
	}
}

func (c *checker) fail(property string, ops []*Op, format string, args ...any) {
	c.out = append(c.out, Violation{Property: property, Detail: fmt.Sprintf(format, args...), Ops: ops})
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
	// no longer. So is a value computed wholly while a fault kept its
	// replica from Redis, though the path that answered it first
	// (GetOrCompute, a batch) did not say Degraded.
	if cp := c.computes[a.v.ID]; cp != nil && cp.Replica == a.op.Replica &&
		(c.degradedIDs[a.v.ID] || cp.Ended > 0 && c.cutOff(cp.Replica, cp.Began, cp.Ended)) &&
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

// readAt is when a's value read the source of truth, as far as the
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

// setReturned is when a Set's value was certainly written: its Set's return.
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

// certainlyBefore reports whether a's value certainly came from before t:
// a Set's value written (its Set returned) before t, a computed one read
// from the source of truth before t. The invalidation and write
// properties ask it of every answer an operation at t must have reached.
func (c *checker) certainlyBefore(a answer, t time.Duration) bool {
	if a.v.Src == "set" {
		ret, ok := c.setReturned(a)
		return ok && ret < t
	}
	at, ok := c.readAt(a)
	return ok && at < t
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
