// Package marks holds the invalidation marks as a process holds them.
//
// Invalidation by tag and Clear rest on one counter per namespace, G, and
// one mark per tag (and one for the namespace, raised by Clear):
//
//   - a claim reads G before its compute starts (in the claim's round
//     trip) and the entry it fills is stamped with it: its generation;
//   - an invalidation raises G (INCR) and then raises each of its tags'
//     marks to the new G, so every compute that began before it has a
//     generation below the mark;
//   - an entry answers only while each of its tags' marks, and the
//     namespace's, is at most its generation. A hard mark above it makes it
//     a miss; a soft mark above it makes it expired (usable for
//     stale-if-error).
//
// Each process caches the marks it has read. A mark read is trusted for
// InvalidationWait (δ), measured on the monotonic clock from the moment the
// read was sent to the moment of the decision it serves (see "A slow or
// distant Redis" below); past that it is read again, in one round trip shared by
// the concurrent callers (and in the background from δ/2 on, so a hot
// tag's reads never wait). An invalidation returns δ after its marks were
// written: whoever serves after that relies on a read sent after the write,
// which saw it. Notifications raise cached marks at once but never extend
// their trust. In process-local mode the marks are this process's own:
// always current.
//
// Trusted by the subscription. With a single Redis (not a Cluster, nor a
// Ring) a process also subscribes to the channel that carries every
// invalidation's announcement (published after its marks, in the same
// pipeline or script), and PINGs that connection in the background every
// δ/4 (cache/internal/notify/heartbeat.go). Redis writes a connection's
// replies and pushes in the order it produced them, so the answer to a
// PING sent at t comes after every announcement published before Redis
// processed it, and those were applied before the answer is looked at. A
// mark read sent after a heartbeat of the same subscription session was
// answered (the subscription then in effect on the socket that carries it)
// is at least every mark raised before its read was processed, and the
// announcements add every one raised after, up to t: it is vouched for
// until t + δ, like a read sent at t. An invalidation not in it was
// published after t and returns after t + δ. A break of the connection
// moves the session on before anything else is read from it or written to
// it (every go-redis reconnect comes with an error to the goroutine that
// caused it), which withdraws that trust at once: the marks are read again,
// as above, until a heartbeat of the new session was answered and they
// were read after it. So a process far from Redis pays no marks read on
// its requests while its heartbeats are answered within 3δ/4;
// InvalidateTags keeps its wait of δ.
//
// Demand-driven. The heartbeat runs only while decisions want it, on the
// credit they grant it: a check that finds no read recent enough to vouch
// for a mark on its own asks the heartbeat (beatVouches), which tells it so
// (Want); each heartbeat period in which one did grants it eight PINGs, up
// to max(3 s, 4δ) of them, and it stops when they are spent, so that an
// idle process sends Redis nothing and a decision costs at most eight. A
// stopped heartbeat starts again on a Want within 2δ of the previous one;
// a Want after a longer quiet spell leaves it stopped (cache/internal/notify's
// Heartbeat). Nothing in the argument above needs the heartbeats to be
// continuous: a PONG vouches for what was published before Redis
// processed its PING, on the socket of its session, however long the gap
// before it; only the newest answer's trust (δ from its PING) vouches, and
// it lapses on its own. A decision that finds it lapsed (the first after
// an idle spell, or every decision of a process used too seldom to start
// it) is judged as if there were no heartbeat at all: by a read sent less
// than δ before its moment, on the request path if need be, the path every
// decision on a Cluster takes. The read is still covered (cover): a
// heartbeat answered earlier in the live session proves the subscription
// in effect on its socket, so the restarted heartbeat's first answer
// vouches for the marks read since.
//
// A slow or distant Redis. A decision needs a read sent less than δ before
// its moment (a reading taken after the call began), not a read answered
// within δ: an invalidation that returned before that moment wrote its
// marks more than δ before it, so before the read was sent, and the read
// saw them. A check therefore takes its moment before it sends a read,
// and that read vouches for it however late the answer comes: a Redis
// farther away than δ costs a decision one marks read (CheckFence two),
// instead of leaving
// every entry unvouched (refused as a hit, judged Unknown as an answer). A
// read the check joins that was sent more than δ before its moment vouches
// for nothing: it reads again.
//
// The fence against computes in flight (CheckFence) is judged at the
// answer's moment, after the read: an invalidation the read missed was
// written after Redis ran it and returns δ plus the invalidator's return
// trip after that at the earliest, while the answer reaches its caller
// one return trip of the read after it (this process's pauses included).
// An answer that came within δ of the read's sending is sure; one that
// came later is read once more, and judged by the second read, which a
// single late reply or pause does not delay. So the fence holds unless
// the second read's own delay from Redis to the answer also exceeds the
// invalidator's return trip by δ: never while Redis answers this process
// within δ, and at any distance while it is as far from the invalidator
// as from this process.
//
// Across a loss of Redis's data. A restart without persistence, or a
// failover to a replica that missed the latest writes, takes G back (to 0,
// or a few ticks) and may lose marks, while the processes keep the marks
// they have read: they never lower them, so none forgets an invalidation
// it saw. Two rules keep that from refusing every later compute, and keep
// the invalidations made after the loss above what was stamped before it:
//
//   - G is only ever written by advance
//     (cache/internal/scripts/advance.lua), to max(G + step, floor + step,
//     the Redis server's clock in µs), where floor is the highest
//     generation the writing process has seen (marks read or announced,
//     counters read). While Redis keeps its data, G only rises, and an
//     invalidation's new G exceeds every generation read before it
//     (G + 1): the guarantee above needs no clock.
//   - A process that reads G below its floor (a claim, a Set, a recompute)
//     restores it first (advance with step 0) and stamps the compute with
//     the restored value, read before the compute begins. Its stamp is then
//     at least every mark it holds: its computes are valid again at once,
//     fn running once. Restoring is a max, so a read that was merely stale
//     costs a round trip, never a wrong answer.
//
// What holds across the loss: (1) a process that saw an invalidation keeps
// refusing what it refused; (2) an invalidation made after the loss gets a
// generation above every generation stamped before the loss, so it refuses
// every value computed before it wherever that value survived (another
// replica's L1, a compute in flight, a Cluster node that kept it). The
// invalidating process's floor ensures it for every generation that
// process saw; the clock term for all of them, on any process: G runs
// ahead of the clock of its last write only by the ticks that came faster
// than one a microsecond (no namespace sees a million invalidations a
// second), so the first write after the loss is above every G before it
// as long as the clock of the Redis server making it reads later than the
// clock did at the last write before the loss. A clock set back further
// weakens (2) to the floors, never (1). (3) What Redis lost before a
// process read it is lost to that process: an invalidation whose marks
// were lost no longer refuses, on a replica that had not read them, a
// value stamped before it that survived the loss elsewhere — the price of
// a write Redis acknowledged and then lost, as with a lease lost in a
// failover. A standalone Redis restarted empty loses those values with
// the marks, and every replica drops its L1 when its subscription breaks.
//
// Where it lives: this file holds the model (an entry's stamp, a mark,
// this process's slot of each mark and the marks it has read); check.go
// checks an entry against them; heartbeat.go is their trust by the
// subscription's heartbeats; announce.go applies and encodes an
// invalidation's announcement. The Redis half (the reads and writes of the
// counter and the marks, within their budgets) is cache/internal/redisstore's
// marks.go, which reports failures to cache's breaker; cache hands its read
// in as Marks.Read and the breaker's verdict as Marks.Available, and cache's
// tags.go validates the tags.
package marks

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/singleflight"
)

// Stamp is an entry's generation and tags.
type Stamp struct {
	Gen  uint64
	Tags []string
	// slots are the tags' mark slots, resolved once for an entry kept in
	// L1 (nil otherwise), valid while marks' epoch is still epoch.
	slots []*markSlot
	epoch uint64
}

// Mark is what the invalidations of a tag (or the namespace) left: the
// value of G at its last hard and at its last soft invalidation.
type Mark struct{ Hard, Soft uint64 }

// State is the invalidation check's answer for an entry.
type State uint8

// A check's verdicts.
const (
	Valid State = iota // no invalidation since its compute began
	Soft               // soft-invalidated: expired, usable for stale-if-error
	Hard               // invalidated: a miss
	// Unknown: the marks could not be read (Redis unreachable, silent past
	// the read's bound, or failing). The entry does not answer as a hit
	// (it is expired), but, as in degraded mode, it may still stand in for
	// a failing compute, and a value computed here answers unchecked.
	Unknown
)

const (
	// maxMarkSlots bounds the tags whose marks a process caches; past it
	// the cache is dropped and re-read as needed.
	maxMarkSlots = 1 << 16
	// namespaceTag names the namespace's mark in announcements.
	namespaceTag = "*"
)

// markSlot is one mark as this process knows it: at least the mark as it
// was when the read that vouches for it was sent.
type markSlot struct {
	hard, soft atomic.Uint64
	// sent is when (ns on marks' monotonic clock) the latest read whose
	// answer is in hard and soft was sent; 0: never read.
	sent atomic.Int64
	// refreshing is set while a background re-read is under way.
	refreshing atomic.Bool
	// cov is the subscription session in which a read was sent after a
	// heartbeat had confirmed the subscription (0: none): from then on the
	// announcements keep the mark current while the session lasts.
	cov atomic.Uint64
}

// raise records m, read by a request sent at sent (0: an announcement,
// which vouches for nothing). Marks are raised before sent, and read after
// it, so whoever trusts sent sees marks at least as high.
func (s *markSlot) raise(m Mark, sent int64) {
	Raise(&s.hard, m.Hard)
	Raise(&s.soft, m.Soft)
	if sent > 0 {
		for {
			cur := s.sent.Load()
			if cur >= sent || s.sent.CompareAndSwap(cur, sent) {
				break
			}
		}
	}
}

// against judges an entry of generation gen.
func (s *markSlot) against(gen uint64) State {
	switch {
	case s.hard.Load() > gen:
		return Hard
	case s.soft.Load() > gen:
		return Soft
	}
	return Valid
}

// Raise sets a to v unless it is already at least v: a counter or floor
// that only goes up (a mark here, L1's floors in cache). It returns the
// value it replaced (a's own when a was at v or past it already):
// everything that raised a before this call.
func Raise(a *atomic.Uint64, v uint64) (was uint64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return cur
		}
	}
}

// Marks is a process's cache of the marks it has used. Its exported fields
// are set by the cache, in New, before its first use.
type Marks struct {
	// Trust is InvalidationWait; Local says the marks are this process's
	// own (process-local mode): always current, never read.
	Trust time.Duration
	Local bool
	Base  time.Time    // the monotonic clock's origin
	Clock func() int64 // nil: time since Base; tests move their own
	ns    markSlot     // the namespace's (Clear)
	tags  sync.Map     // tag -> *markSlot
	n     atomic.Int64
	epoch atomic.Uint64 // raised when tags is dropped
	reads singleflight.Group[struct{}]
	// Read reads marks from the store; Spawn runs a background refresh
	// (at most one per name at a time, stopped by the cache's Close).
	Read  func(ctx context.Context, tags []string) ([]Mark, error)
	Spawn func(name string, work func(ctx context.Context))
	// Patience is how long a marks read may take while Redis answers as it
	// did lately (the Redis budget's Expect); a read is given at least
	// Trust. nil: Trust.
	Patience func() time.Duration
	// Available reports whether the store may be asked (the breaker).
	Available func() bool
	// Answering reports whether Redis answered a step of this process
	// within the last window (the Redis budget's Answered): a fence whose
	// reads keep failing while it does is slowed by load, not cut off,
	// and reads on (see CheckFence). nil: never.
	Answering func(window time.Duration) bool
	// Longest bounds a fence that reads on (the Redis budget's ceiling,
	// WaitTimeout); 0: two reads' bounds, as for a silent Redis.
	Longest time.Duration
	// ErrUnavailable is the error a check that Available refused wraps
	// (cache.ErrUnavailable, handed in by the cache).
	ErrUnavailable error
	// Session is the invalidation subscription's live session (nil: no
	// heartbeat, the marks are trusted by their reads alone); beat is the
	// newest heartbeat answered in it. See "Trusted by the subscription".
	Session func() uint64
	beat    atomic.Pointer[heartbeat]
	// Want tells the heartbeat that a decision wanted its trust (nil: no
	// heartbeat to tell); see "Demand-driven".
	Want func()
	// seen is the highest generation this process has seen (in a mark
	// read or announced, or a counter read): the floor below which it
	// never writes the counter (see "Across a loss of Redis's data").
	seen atomic.Uint64
}

// maxGen bounds the generations a process takes in: Lua's numbers, which
// the counter scripts compute with, are exact up to 2^53.
const maxGen = 1 << 53

// Saw records generation g as seen.
func (m *Marks) Saw(g uint64) {
	for {
		cur := m.seen.Load()
		if g <= cur || m.seen.CompareAndSwap(cur, g) {
			return
		}
	}
}

// Floor is the highest generation this process has seen.
func (m *Marks) Floor() uint64 { return min(m.seen.Load(), maxGen) }

// MonoAt is t on marks' monotonic clock when t is a reading of the real
// clock (time.Now, with its monotonic part), else 0 (a zero t too).
func (m *Marks) MonoAt(t time.Time, real bool) int64 {
	if !real || m.Clock != nil || t.IsZero() {
		return 0
	}
	return max(int64(t.Sub(m.Base)), 1)
}

// Mono is the time on marks' monotonic clock, never 0.
func (m *Marks) Mono() int64 {
	if m.Clock != nil {
		return max(m.Clock(), 1)
	}
	return max(int64(time.Since(m.Base)), 1)
}

// slot returns tag's slot ("" is the namespace's), creating it.
func (m *Marks) slot(tag string) *markSlot {
	if tag == "" {
		return &m.ns
	}
	if s, ok := m.tags.Load(tag); ok {
		return s.(*markSlot)
	}
	if !m.Local && m.n.Load() >= maxMarkSlots {
		m.epoch.Add(1) // before: a stamp resolved now is checked anew
		m.tags.Clear() // re-read as needed; never in local mode, where slots are the truth
		m.n.Store(0)
	}
	s, loaded := m.tags.LoadOrStore(tag, new(markSlot))
	if !loaded {
		m.n.Add(1)
	}
	return s.(*markSlot)
}

// Resolve returns st with its tags' slots looked up, for an entry that
// will be checked many times (L1).
func (m *Marks) Resolve(st Stamp) Stamp {
	if len(st.Tags) == 0 {
		return st
	}
	st.epoch = m.epoch.Load()
	st.slots = make([]*markSlot, len(st.Tags))
	for i, t := range st.Tags {
		st.slots[i] = m.slot(t)
	}
	return st
}
