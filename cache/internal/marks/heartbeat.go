package marks

// The marks' trust by the subscription (marks.go, "Trusted by the
// subscription"): the heartbeats answered in the invalidation
// subscription's session, and the reads they vouch for.

// heartbeat is a heartbeat of the invalidation subscription answered in
// session: every announcement published before sent (marks' clock) has
// been applied.
type heartbeat struct {
	session uint64
	sent    int64
}

// Beaten records a heartbeat answered in session (the notifier's
// callback, on its receiving goroutine, after the announcements received
// before it were applied).
func (m *Marks) Beaten(session uint64, sent int64) {
	for {
		cur := m.beat.Load()
		if cur != nil && (cur.session > session || cur.session == session && cur.sent >= sent) {
			return
		}
		if m.beat.CompareAndSwap(cur, &heartbeat{session: session, sent: sent}) {
			return
		}
	}
}

// cover is the session a mark read sent now is covered in: the live one
// once a heartbeat answered in it, else 0. The heartbeat's answer came
// after the subscription took effect on the socket that carries the
// session, so a read sent after it sees every mark raised before it was
// processed, and the session's announcements every one raised after.
func (m *Marks) cover() uint64 {
	if m.Session == nil {
		return 0
	}
	if b := m.beat.Load(); b != nil && b.session == m.Session() {
		return b.session
	}
	return 0
}

// beatVouches reports whether the subscription vouches for s's mark at
// now: it was read in the live session, after a heartbeat confirmed it,
// and a heartbeat sent less than trust ago was answered in that session.
//
// It is asked only when a read does not vouch for the mark on its own, so
// it is where a decision wants the heartbeat: with want, it tells the
// heartbeat so (Want), which grants a running one a few more PINGs, or
// starts a stopped one if the previous Want was recent, whose answers
// vouch for the decisions that follow; this one is vouched for as it can
// be now, or reads the marks (see "Demand-driven" in marks.go). A decision
// asks with want once, as it begins: its fence (CheckFence) and its
// re-check after a read do not, so that one slow decision is not taken
// for two close together.
func (m *Marks) beatVouches(s *markSlot, now int64, want bool) bool {
	if m.Session == nil {
		return false
	}
	if want && m.Want != nil {
		m.Want()
	}
	b := m.beat.Load()
	return b != nil && now-b.sent < int64(m.Trust) && s.cov.Load() == b.session && b.session == m.Session()
}
