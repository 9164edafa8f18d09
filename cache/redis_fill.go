package cache

// The claims and fills of the Redis store as the seam sees them: the steps
// are internal/redisstore's (ClaimMany, FillMany, Abandon, KeepAlive); this
// file decodes what a claim read, encodes what a fill stores, and reports
// the claims to the Observer and a lost lease to the Observer and the log.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/stampede-go/stampede/cache/internal/redisstore"
	"github.com/stampede-go/stampede/lease"
)

// errLeaseUnanswered is the cause of a lease given up because Redis did not
// answer its extensions for a whole lease TTL.
var errLeaseUnanswered = errors.New("cache: Redis did not answer the lease's extensions for a whole lease TTL")

// claimMany implements [store] with redisstore.ClaimMany: a lease won
// carries the key's value as it was at that moment, decoded here, so the
// lead needs no read of its own.
func (s *redisStore[V]) claimMany(ctx context.Context, ks []keys) []claimed[V] {
	out := make([]claimed[V], len(ks))
	start := time.Now()
	s.p.ClaimMany(ctx, ks, func(i int, r redisstore.Claimed) {
		c := claimed[V]{won: r.Won, remaining: r.Remaining, err: r.Err}
		if r.Won {
			c.claim = claim[V]{k: ks[i], token: r.Token, reread: true}
			if r.Found {
				cl := &c.claim
				cl.seen, cl.found, _ = s.c.decodeEntry(ctx, ks[i].Key, reply{Envelope: r.Seen, Found: true}, false)
				if cl.found && !cl.seen.negative {
					cl.raw = envelopeValue(r.Seen)
				}
			}
		}
		c.claim.gen = r.Gen
		out[i] = c
		s.c.observeClaim(ctx, ks[i].Key, c, start)
	})
	return out
}

// keepAlive implements [store] with redisstore.KeepAlive: the claim's lease
// is extended while its holder computes.
func (s *redisStore[V]) keepAlive(ctx context.Context, cl claim[V]) func() {
	return s.p.KeepAlive(ctx, cl.k, cl.token)
}

// leaseLost reports a lease lost while its holder computes: taken (cause
// nil), or unanswered for a whole LeaseTTL.
func (s *redisStore[V]) leaseLost(key string, cause error) {
	err := lease.ErrLeaseLost
	if cause != nil {
		err = errors.Join(lease.ErrLeaseLost, errLeaseUnanswered, cause)
	}
	ctx := context.Background()
	s.c.observe(ctx, Event{Kind: EventLeaseLost, Key: key, Err: err})
	s.c.logRare(ctx, slog.LevelWarn, "stampede: lease lost while computing; the fill's compare-and-set decides whether the value is stored", key, err)
}

// fillMany implements [store] with redisstore.FillMany: an entry that does
// not encode (or is too large) is not storable, and its claim is
// abandoned; the others are stored in one round trip, a failure retried
// in the background.
func (s *redisStore[V]) fillMany(ctx context.Context, reqs []fillReq[V]) []fillResult {
	out := make([]fillResult, len(reqs))
	fills := make([]redisstore.Fill, len(reqs))
	for i, r := range reqs {
		b, err := s.c.encodeEntryRaw(r.e, r.raw)
		if err != nil {
			out[i].unstored = err
			s.abandon(ctx, r.k, r.claim)
			continue
		}
		fills[i] = redisstore.Fill{K: r.k, Token: r.claim.token, Envelope: b, KeepMillis: keepMillis(r.e.w, s.c.now())}
	}
	s.p.FillMany(ctx, fills, func(i int, f redisstore.Filled) {
		out[i].stored, out[i].fenced, out[i].failed = f.Stored, f.Fenced, f.Failed
		if f.Stored && s.c.l1 != nil {
			env := fills[i].Envelope
			out[i].digest, out[i].size = s.c.l1.digestBytes(env), len(env)
		}
	})
	return out
}

// abandon implements [store]: the lease is released and the waiters woken,
// so that one of them takes over at once.
func (s *redisStore[V]) abandon(ctx context.Context, k keys, cl claim[V]) {
	s.p.Abandon(ctx, k, cl.token)
}
