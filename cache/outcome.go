package cache

import "time"

// Outcome says how a [Cache.Fetch] was answered.
type Outcome uint8

// The outcomes of a Fetch.
const (
	// Hit: a fresh value was found.
	Hit Outcome = iota + 1
	// Miss: this caller ran the compute function.
	Miss
	// Shared: another caller in this process ran it and shared the result.
	Shared
	// Waited: another replica computed the value and this caller waited for it.
	Waited
	// Stale: a stale value was served; a refresh runs in the background.
	Stale
	// Fallback: another replica kept computing past WaitTimeout and the
	// caller's fallback answered.
	Fallback
	// Degraded: Redis was unreachable and the value was computed locally.
	Degraded
)

var outcomeNames = [...]string{"unknown", "hit", "miss", "shared", "waited", "stale", "fallback", "degraded"}

// String returns the outcome's lower-case name, e.g. "hit".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return outcomeNames[0]
}

// Result is a value and how it was obtained.
type Result[V any] struct {
	// Value is the cached or computed value.
	Value V
	// Outcome says how the call was answered.
	Outcome Outcome
	// Age is how long ago the value was computed: 0 when this call's
	// compute produced it (Miss, Shared, Fallback, and a Degraded
	// compute), however long storing it took; for a Hit, Waited or Stale
	// answer, the time since the replica that computed it did (stored to
	// the millisecond); for a Degraded answer from a value this process
	// computed earlier in the outage, the time since then.
	Age time.Duration
	// Err is the origin's error when a stale value answered because the
	// compute failed (stale-if-error); Outcome is then Stale. Nil otherwise.
	Err error
}
