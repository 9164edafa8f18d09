package lease

// The restart quarantine of a Quorum's grants: a server that restarted
// within it, and may have lost a lease that is still valid, does not count
// towards a majority.

import (
	"context"
	"fmt"
	"time"
)

// Flags of a grant's reply (quorum_acquire.lua).
const (
	// flagRestarted: the server restarted less than the quarantine ago and
	// has taken no fenced lease on the name since.
	flagRestarted = 1
	// flagKnown: the server holds the name's fence or run key.
	flagKnown = 2
)

// restartQuarantine is how long a restarted server's grants of a lease of
// ttl do not count (0: off).
func (q *Quorum) restartQuarantine(ttl time.Duration) time.Duration {
	switch {
	case q.opts.RestartQuarantine < 0:
		return 0
	case q.opts.RestartQuarantine > 0:
		return q.opts.RestartQuarantine
	}
	return ttl
}

// screen takes out of a grant's yes answers those of servers that
// restarted within the quarantine and have taken no fenced lease on the
// name since, when such a server may have lost a lease that is still
// valid: some server shows that the name was leased (its fence or run key
// is there) and not every other server said yes (one holds the lease, or
// did not answer, and may hold it). A lease that a restart lost ends within
// its TTL of the restart, so a server younger than the quarantine is the
// only kind that can have lost a valid one; when every server answered and
// none holds the lease, no lease is valid, and the restarted server counts
// (and its write-back records that it has taken part since its start).
func (q *Quorum) screen(ctx context.Context, name string, t *tally, quarantine time.Duration) {
	if quarantine <= 0 || len(t.no) == 0 && len(t.errs) == 0 {
		return
	}
	known := false
	for _, f := range t.flags {
		known = known || f&flagKnown != 0
	}
	if !known {
		return // a name never leased (or not for FenceTTL): nothing to lose
	}
	yes, vals := t.yes[:0:0], t.vals[:0:0]
	for k, i := range t.yes {
		if t.flags[i]&flagRestarted == 0 {
			yes, vals = append(yes, i), append(vals, t.vals[k])
			continue
		}
		err := fmt.Errorf("lease: acquire %q on server %d (%s): %w (up %ds) and has taken no lease on the name since: not counted until up %s, as it may have lost one in a restart",
			name, i, q.addrs[i], ErrServerRestarted, t.up[i], quarantine)
		q.opts.observe(ctx, Event{Kind: EventRedisError, Name: name, Err: err})
		t.errs = append(t.errs, err)
		t.restarted++
	}
	t.yes, t.vals = yes, vals
}
