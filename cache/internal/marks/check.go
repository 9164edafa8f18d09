package marks

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Checking an entry against the marks (marks.go): a verdict from what this
// process knows when its reads are recent enough, else the marks read again
// in one round trip shared by the callers, or in the background before
// their trust runs out.

// check judges st against the marks of the namespace and of its tags,
// reading those not vouched for by a read sent less than trust before the
// decision's moment (again, up to maxMarkReads times, while the reads
// joined were sent too early or fail). An error comes with Unknown: they
// could not be vouched for.
func (m *Marks) check(ctx context.Context, st Stamp) (State, error) {
	return m.CheckAt(ctx, st, 0)
}

// CheckAt is check with the monotonic time now (on marks' clock) when the
// caller has it (0: read the clock), saving a clock read on the hit path.
//
// An entry without tags whose namespace mark is vouched for (read less
// than half the trust ago, or by the subscription's heartbeat: a hot key's
// every hit) is judged here, in a small frame: the same verdict checkAt
// gives it, without checkAt's frame and closure.
func (m *Marks) CheckAt(ctx context.Context, st Stamp, now int64) (State, error) {
	if len(st.Tags) == 0 && !m.Local && now > 0 && m.nsVouched(now) {
		return m.ns.against(st.Gen), nil
	}
	return m.checkAt(ctx, st, now, false)
}

// CheckFence is check for an answer about to reach its caller, the fence
// against computes in flight: an invalidation that returns before the
// answer reaches the caller must refuse it, so the moment that counts is
// the answer's, after the read. A read whose answer came δ or more after
// it was sent (a distant Redis, a lost packet sent again, a pause of this
// process) is sent once more and the check judges by that second read,
// which a single late reply or pause does not delay; see marks.go, "A
// slow or distant Redis", for what holds when both are late.
func (m *Marks) CheckFence(ctx context.Context, st Stamp) (State, error) {
	return m.checkAt(ctx, st, 0, true)
}

// UntaggedValidAt reports whether CheckAt says Valid, from what this
// process knows, for an entry of generation gen without tags at the
// monotonic time now: the namespace's mark is vouched for (CheckAt's
// small case) and not above gen. false says nothing: ask CheckAt.
func (m *Marks) UntaggedValidAt(gen uint64, now int64) bool {
	return !m.Local && now > 0 && m.nsVouched(now) && m.ns.against(gen) == Valid
}

// nsVouched reports whether the namespace's mark is vouched for at now:
// read less than half the trust ago, or by the subscription's heartbeat.
func (m *Marks) nsVouched(now int64) bool {
	sent := m.ns.sent.Load()
	return sent != 0 && now-sent < int64(m.Trust)/2 || m.beatVouches(&m.ns, now, true)
}

// checkAt is CheckAt's and CheckFence's every case. now, the decision's
// moment, is taken before any read this check sends: a read sent after it
// vouches for it however late its answer comes (marks.go, "A slow or
// distant Redis"); fence: CheckFence's second read.
func (m *Marks) checkAt(ctx context.Context, st Stamp, now int64, fence bool) (State, error) {
	slots := st.slots
	if len(st.Tags) > 0 && (slots == nil || st.epoch != m.epoch.Load()) {
		slots = m.Resolve(st).slots
	}
	if m.Local {
		state := m.ns.against(st.Gen)
		for _, s := range slots {
			state = max(state, s.against(st.Gen))
		}
		return state, nil
	}
	if now <= 0 {
		now = m.Mono()
	}
	state := Valid
	var unsure []string
	look := func(tag string, s *markSlot) {
		// What this process knows of a mark applies however old it is
		// (marks only go up): only a verdict of "valid" needs a recent read.
		state = max(state, s.against(st.Gen))
		sent := s.sent.Load()
		if sent != 0 && now-sent < int64(m.Trust)/2 {
			return
		}
		// A fence is part of a decision that asked already, when it
		// began: it does not ask again (a slow decision asking twice
		// would start a stopped heartbeat on its own, see Want).
		if m.beatVouches(s, now, !fence) {
			return
		}
		if sent == 0 || now-sent >= int64(m.Trust) {
			unsure = append(unsure, tag)
		} else if !s.refreshing.Load() && s.refreshing.CompareAndSwap(false, true) {
			m.refreshAsync(tag, s)
		}
	}
	look("", &m.ns)
	for i, t := range st.Tags {
		look(t, slots[i])
	}
	if len(unsure) == 0 {
		return state, nil
	}
	if state == Hard {
		return state, nil
	}
	var err error
	known := state // a soft invalidation known already stays one if the marks cannot be read
	again := fence // CheckFence may read once more after a late answer
	begun := m.Mono()
	if fence {
		// The fence's reads are sent within two reads' bounds of its start,
		// the one sent again after a failure or a late answer included,
		// while Redis is silent: a silent Redis costs the fence that much
		// (the loop below). Each runs to its own bound, which a late reply
		// may have raised meanwhile (a Redis that turned slow: its second
		// read, sent within the two bounds, must not be cut at them). While
		// Redis answers or this process is starved (readsOnUnderLoad), reads
		// go on up to Longest.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.Longest+2*m.readBound())
		defer cancel()
	}
	for reads := 0; reads < maxMarkReads; reads++ {
		if m.Available != nil && !m.Available() {
			return unknownAfter(known), fmt.Errorf("cache: invalidation marks: %w", m.ErrUnavailable)
		}
		// A read that failed (Redis silent past the read's bound, refusing,
		// or answering an error) is not sent again for a decision, which
		// then refuses the entry (Unknown): another would cost as much,
		// and the breaker sees the failure. The fence sends it again: an
		// Unknown there lets the answer through unchecked, which a read
		// slowed past its bound by load must not do.
		sent := m.Mono()
		if err = m.refresh(ctx, unsure); err != nil {
			if !fence || ctx.Err() != nil {
				break
			}
			if m.Mono()-begun < 2*int64(m.readBound()) {
				continue
			}
			if !m.readsOnUnderLoad(sent) {
				break
			}
			reads-- // bounded by the fence's context instead
			continue
		}
		vouched, s := m.vouched(unsure, st.Gen, now)
		if s == Hard {
			// Marks only go up: a hard invalidation read is one, however
			// long ago the read was sent; a read sent again for the
			// answer's moment cannot undo it (a failed one would have
			// judged the answer Unknown).
			return Hard, nil
		}
		known = max(known, s)
		switch {
		case !vouched: // the read joined was sent more than trust before now: read again
			err = fmt.Errorf("cache: invalidation marks not read within %s (Options.InvalidationWait) of the decision", m.Trust)
		case again:
			inTime, s := m.vouched(unsure, st.Gen, m.Mono())
			if !inTime {
				again = false
				err = fmt.Errorf("cache: invalidation marks read more than %s (Options.InvalidationWait) before the answer", m.Trust)
				continue
			}
			return max(state, s), nil
		default:
			return max(state, s), nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return unknownAfter(known), err
}

// readsOnUnderLoad reports whether a fence past two reads' bounds, whose
// read sent at sent failed, sends another: only when the failure was
// load, not silence nor a refusal. The read ran to its bound (it was
// slow, not refused or answered with an error), and Redis answered a step
// of this process within the last read's bound (Answering), or this
// process was starved of CPU (the read's end was seen a quarter of a bound
// or more past its bound: a reply may have sat unread in its socket).
// Redis is reachable then, and an Unknown would let the answer through
// unchecked on a replica that could learn of the invalidation (issue 39
// item 10). The fence's context (Longest, and its caller's) bounds the
// reads it sends on.
func (m *Marks) readsOnUnderLoad(sent int64) bool {
	bound := int64(m.readBound())
	took := m.Mono() - sent
	switch {
	case took < bound/2:
		return false
	case took-bound >= bound/4:
		return true
	}
	return m.Answering != nil && m.Answering(time.Duration(bound))
}

// unknownAfter is the verdict when the marks could not be read: Unknown,
// unless what is already known says more (a soft invalidation).
func unknownAfter(known State) State {
	if known == Soft {
		return Soft
	}
	return Unknown
}

// maxMarkReads bounds the reads of one check that it joined when they
// were sent too early for it (and CheckFence's second read, and its reads
// that failed), before the entry is judged Unknown.
const maxMarkReads = 4

// vouched reports whether the marks of tags are all vouched for at the
// decision's moment now by reads sent less than trust before it (or
// after it), and judges gen against them.
func (m *Marks) vouched(tags []string, gen uint64, now int64) (bool, State) {
	state := Valid
	for _, t := range tags {
		s := m.slot(t)
		if now-s.sent.Load() >= int64(m.Trust) && !m.beatVouches(s, now, false) {
			return false, state
		}
		state = max(state, s.against(gen))
	}
	return true, state
}

// refresh reads the marks of tags in one round trip shared by the callers
// asking for the same tags, bounded by trust or by the round trip Redis
// shows (Patience), whichever is longer: its answer vouches for the
// decisions whose moment came before it was sent, however late it comes,
// so a slow or distant Redis is waited for, while a silent one costs a
// check one such bound: trust after a healthy period, about twice the
// round trip after a slow one, as a Redis step's budget does.
func (m *Marks) refresh(ctx context.Context, tags []string) error {
	_, _, err := m.reads.Do(ctx, strings.Join(tags, " "), func(ctx context.Context) (struct{}, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.readBound())
		defer cancel()
		cov := m.cover() // before the read is sent
		sent := m.Mono()
		got, err := m.Read(ctx, tags)
		if err != nil {
			return struct{}{}, err
		}
		for i, t := range tags {
			s := m.slot(t)
			s.raise(got[i], sent)
			Raise(&s.cov, cov)
			m.Saw(max(got[i].Hard, got[i].Soft))
		}
		return struct{}{}, nil
	})
	return err
}

// readBound is how long one marks read may take: trust or the round trip
// Redis shows (Patience), whichever is longer.
func (m *Marks) readBound() time.Duration {
	if m.Patience != nil {
		return max(m.Trust, m.Patience())
	}
	return m.Trust
}

// refreshAsync re-reads tag's mark in the background, before its trust
// runs out, so that a hot tag's hits never wait for it.
func (m *Marks) refreshAsync(tag string, s *markSlot) {
	m.Spawn("\x00marks "+tag, func(ctx context.Context) {
		defer s.refreshing.Store(false)
		_ = m.refresh(ctx, []string{tag})
	})
}

// SoftAbove reports whether a soft mark of st's tags or of the namespace,
// as this process knows it, is above both st's generation and floor (a
// Floor read earlier): a soft invalidation of st's entry that this
// process learnt of after it read floor. A value that passed a soft
// invalidation only because it stood in for a failed compute (see cache's
// batch fence) is refused by one it learnt of after that compute's
// attempt began. Nothing is read: call it after a check that vouched for
// st's marks.
func (m *Marks) SoftAbove(st Stamp, floor uint64) bool {
	limit := max(st.Gen, floor)
	if m.ns.soft.Load() > limit {
		return true
	}
	slots := st.slots
	if len(st.Tags) > 0 && (slots == nil || st.epoch != m.epoch.Load()) {
		slots = m.Resolve(st).slots
	}
	for _, s := range slots {
		if s.soft.Load() > limit {
			return true
		}
	}
	return false
}
