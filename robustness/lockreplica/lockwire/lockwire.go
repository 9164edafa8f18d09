// Package lockwire is what the robustness suite's lock workload and its
// holder program (robustness/lockreplica) say to each other: the holder's
// configuration, one JSON argument, and the reports it writes to its
// standard output, one JSON object a line.
package lockwire

import "time"

// Config configures one holder.
type Config struct {
	// Holder names the holder in reports and in the rows it writes.
	Holder string
	// Servers are the addresses of the Redis servers of the quorum, as
	// this holder reaches them (its own fault proxies).
	Servers []string
	// PG is PostgreSQL's host:port (user and database "postgres", trust
	// authentication).
	PG string
	// Name is the lease name every holder takes.
	Name string
	// TTL is the lease TTL; ServerTimeout, DriftFactor and
	// RestartQuarantine are the quorum's options.
	TTL, ServerTimeout, RestartQuarantine time.Duration
	DriftFactor                           float64
	// WorkMin and WorkMax bound how long a holder works under a lease
	// between reading the set and writing it back: longer than the TTL
	// takes extensions.
	WorkMin, WorkMax time.Duration
	// Stubborn is the share of leases whose write goes out even after the
	// work's context ended, as a holder already writing when its lease ran
	// out would: the fence must stop it.
	Stubborn float64
	// Single makes the holder take its leases from one Redis, the first
	// of Servers, with a lease.Client (RedisTimeout is ServerTimeout)
	// rather than a quorum.
	Single bool `json:",omitempty"`
	// Shorten is the share of leases whose work first extends the lease to
	// a tenth of its TTL (lease.Extend inside Using), so that the lease
	// ends under the work unless an extension of Using's comes first: the
	// work's context must end at the new deadline.
	Shorten float64 `json:",omitempty"`
	// Deadline is the share of attempts made under a context with a
	// deadline, drawn between a quarter of ServerTimeout and
	// ServerTimeout: Using must return by it when it takes no lease.
	Deadline float64 `json:",omitempty"`
	// Seed seeds the holder's random draws.
	Seed int64
}

// Outcomes of a holder's claim and write.
const (
	OK       = "ok"       // the claim read the set / the write was accepted
	Fenced   = "fenced"   // a higher fence was there first: refused
	Unknown  = "unknown"  // the statement failed on the way: it may have run
	NotTried = "not-sent" // the work stopped before it
)

// Report is one lease a holder held, or one failed attempt to take it.
// Times are wall-clock Unix nanoseconds on the holder's host (the suite
// runs every process on one host, so they compare).
type Report struct {
	Holder string
	// Holding marks a notice sent as the work begins (Fence and Acquired
	// set), so that the suite can aim its faults at the holder; the
	// lease's full report follows.
	Holding bool `json:",omitempty"`
	// Invoke is when Using was called, Acquired when the work began (the
	// lease was taken), End when the work returned.
	Invoke, Acquired, End int64
	// CtxEnd is when the work's context was cancelled, if before End.
	CtxEnd int64 `json:",omitempty"`
	// Until is the lease's validity deadline when it was taken.
	Until int64 `json:",omitempty"`
	// Deadline is the deadline of the context the attempt was made
	// under, if it had one; Shortened says the work extended the lease
	// to a shorter TTL, and ShortUntil is the validity deadline then.
	Deadline   int64 `json:",omitempty"`
	Shortened  bool  `json:",omitempty"`
	ShortUntil int64 `json:",omitempty"`
	Fence      int64 `json:",omitempty"`
	// Claim is the outcome of raising the row's fence to ours and
	// reading the set.
	Claim string `json:",omitempty"`
	// Elem is the element the write adds; WriteAt and WriteDone when it
	// was sent and answered; Write its outcome; Late says it was sent
	// after the work's context ended.
	Elem               int64  `json:",omitempty"`
	WriteAt, WriteDone int64  `json:",omitempty"`
	Write              string `json:",omitempty"`
	Late               bool   `json:",omitempty"`
	// Err is Using's error, and ErrKind its class: "busy", "no-quorum",
	// "unavailable", "lost", "deadline" (the attempt's own deadline
	// passed), or "other" (undocumented).
	Err     string `json:",omitempty"`
	ErrKind string `json:",omitempty"`
	// Detail says what went wrong with the database, when something did.
	Detail string `json:",omitempty"`
}

// Held reports whether the report is of a lease that was held.
func (r Report) Held() bool { return r.Fence != 0 }
