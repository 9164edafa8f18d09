package robustness

// CheckLock: a lock run's history held to the lease package's promises
// (no lease handed out past its validity, an attempt's own deadline kept,
// no overlap of unpaused holders' work beyond the drift allowance, fences
// unique and rising, accepted writes' fences increasing in commit order, no
// acknowledged element lost, documented errors only), with its figures.

import (
	"fmt"
	"sort"
	"time"

	"github.com/stampede-go/stampede/robustness/lockreplica/lockwire"
)

// LockStats are a lock run's figures, for the log.
type LockStats struct {
	Leases, Attempts, Accepted, Fenced, LateFenced, LateAccepted int
	// Closest is the least time between one lease's work ending and the
	// next holder's work beginning (negative: an overlap), among holders
	// that were not paused.
	Closest time.Duration
	Errors  map[string]int
}

// workEnd is when a lease's work stopped being covered by the lease: when
// its context was cancelled, or when the work returned, whichever came
// first.
func workEnd(r lockwire.Report) int64 {
	if r.CtxEnd != 0 && r.CtxEnd < r.End {
		return r.CtxEnd
	}
	return r.End
}

// CheckLock holds a lock run's history to the lease package's promises and
// returns what it broke, with its figures.
func CheckLock(sc LockScenario, h *LockHistory) ([]Violation, LockStats) {
	var vs []Violation
	add := func(prop, format string, args ...any) {
		vs = append(vs, Violation{Property: prop, Detail: fmt.Sprintf(format, args...)})
	}
	st := LockStats{Errors: map[string]int{}, Closest: time.Duration(1 << 62)}
	var held []lockwire.Report
	for _, r := range h.Leases {
		st.Attempts++
		if r.ErrKind != "" {
			st.Errors[r.ErrKind]++
		}
		if r.ErrKind == "other" {
			add("documented-errors", "%s at %s: %s", r.Holder, h.at(r.Invoke), r.Err)
		}
		if r.Held() {
			held = append(held, r)
		}
	}
	st.Leases = len(held)
	sort.Slice(held, func(i, j int) bool { return held[i].Acquired < held[j].Acquired })

	// A fence is handed out once, and above every fence handed out before
	// the attempt that got it began.
	byFence := map[int64]lockwire.Report{}
	for _, r := range held {
		if o, ok := byFence[r.Fence]; ok {
			add("fence-unique", "fence %d handed to %s at %s and to %s at %s", r.Fence, o.Holder, h.at(o.Acquired), r.Holder, h.at(r.Acquired))
		}
		byFence[r.Fence] = r
	}
	for i, x := range held {
		for _, y := range held[i+1:] {
			if x.Acquired < y.Invoke && x.Fence >= y.Fence {
				add("fences-rise", "%s got fence %d at %s; %s, who began trying at %s, got %d", x.Holder, x.Fence, h.at(x.Acquired), y.Holder, h.at(y.Invoke), y.Fence)
			}
		}
	}

	// No lease handed out past its validity: the work begins before the
	// lease's validity deadline (Until, when it was taken), within the
	// drift allowance, unless the holder was paused in between.
	for _, r := range held {
		if r.Until != 0 && time.Duration(r.Acquired-r.Until) > sc.drift() && !h.pausedDuring(r.Holder, r.Invoke, r.Acquired) {
			add("work-within-validity", "%s's work under fence %d began at %s, %s after the lease's validity ended (drift allowance %s)",
				r.Holder, r.Fence, h.at(r.Acquired), time.Duration(r.Acquired-r.Until), sc.drift())
		}
	}

	// An attempt under a deadline of its own that took no lease returns
	// by that deadline (within half a ServerTimeout), unless the holder
	// was paused meanwhile.
	for _, r := range h.Leases {
		if r.Deadline == 0 || r.Held() || h.pausedDuring(r.Holder, r.Invoke, r.End) {
			continue
		}
		if over := time.Duration(r.End - r.Deadline); over > sc.ServerTimeout/2 {
			add("deadline-kept", "%s's attempt from %s with a deadline at %s returned %s after it (%s)",
				r.Holder, h.at(r.Invoke), h.at(r.Deadline), over, r.Err)
		}
	}

	// No two leases' work overlapping beyond the drift allowance, unless
	// the earlier holder was paused during its work (its writes are then
	// the fence's to stop, checked below).
	for i, x := range held {
		xEnd := workEnd(x)
		paused := h.pausedDuring(x.Holder, x.Acquired, xEnd)
		for _, y := range held[i+1:] {
			if y.Holder == x.Holder {
				continue
			}
			gap := time.Duration(y.Acquired - xEnd)
			if !paused && gap < st.Closest && x.Fence < y.Fence {
				st.Closest = gap
			}
			if !paused && -gap > sc.drift() {
				add("exclusion", "%s's work under fence %d (from %s) ended at %s, %s after %s took the lease with fence %d at %s (drift allowance %s)",
					x.Holder, x.Fence, h.at(x.Acquired), h.at(xEnd), -gap, y.Holder, y.Fence, h.at(y.Acquired), sc.drift())
			}
		}
	}

	// The writes PostgreSQL accepted have strictly increasing fences in
	// commit order, and the set holds exactly their elements.
	accepted := map[int64]LockWrite{}
	for i, w := range h.Log {
		if i > 0 && w.Fence <= h.Log[i-1].Fence {
			add("fenced-writes-in-order", "write %d (%s, fence %d) accepted after write %d (%s, fence %d)", w.Seq, w.Holder, w.Fence, h.Log[i-1].Seq, h.Log[i-1].Holder, h.Log[i-1].Fence)
		}
		accepted[w.Elem] = w
	}
	final := map[int64]bool{}
	for _, e := range h.Final {
		if final[e] {
			add("no-lost-writes", "element %d twice in the set", e)
		}
		final[e] = true
		if _, ok := accepted[e]; !ok {
			add("no-lost-writes", "element %d in the set, but no accepted write of it", e)
		}
	}
	for e, w := range accepted {
		if !final[e] {
			add("no-lost-writes", "element %d, accepted with fence %d (write %d by %s), lost from the set", e, w.Fence, w.Seq, w.Holder)
		}
	}
	for _, r := range held {
		switch r.Write {
		case lockwire.OK:
			st.Accepted++
			if r.Late {
				st.LateAccepted++
			}
			if !final[r.Elem] {
				add("no-lost-writes", "%s's write of %d under fence %d was acknowledged but is not in the set", r.Holder, r.Elem, r.Fence)
			}
		case lockwire.Fenced:
			st.Fenced++
			if r.Late {
				st.LateFenced++
			}
			if final[r.Elem] {
				add("no-lost-writes", "%s's write of %d under fence %d was refused but is in the set", r.Holder, r.Elem, r.Fence)
			}
		}
	}
	if st.Accepted == 0 {
		add("progress", "no write was accepted in %d attempts: the run proves nothing", st.Attempts)
	}
	return vs, st
}
