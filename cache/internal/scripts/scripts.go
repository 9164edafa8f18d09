// Package scripts holds the Lua scripts of the cache's Redis protocol, one
// compound step each, and their *redis.Script values. Each script's source
// (a .lua file beside this one) opens with what it reads and writes; the
// doc comments below say the keys, arguments and reply a caller passes and
// reads. All the keys of one call share a hash tag ({ns:k} or {ns}), so
// every script runs on one Cluster slot.
//
// The per-key keys: {ns:k}:v the value's envelope (see internal/envelope),
// {ns:k}:l the lease (a claimer's random token), {ns:k}:n the channel its
// fills, Sets and Deletes are announced on. The invalidation keys: {ns}:inv
// the namespace's counter and mark (hash fields 'g', 'h', 's'), {ns:tag}:t
// a tag's mark (fields 'h', 's'). An "SPUBLISH flag" is '1' to announce on
// the key's channel with SPUBLISH (sharded pub/sub on a Cluster), anything
// else for PUBLISH; the invalidation channel is always broadcast.
package scripts

import (
	_ "embed" // the scripts' sources

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed claim.lua
	claimSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed fill.lua
	fillSrc string
	//go:embed abandon.lua
	abandonSrc string
	//go:embed set.lua
	setSrc string
	//go:embed delete.lua
	deleteSrc string
	//go:embed expire.lua
	expireSrc string
	//go:embed mark.lua
	markSrc string
	// advance.lua is the one definition of how the namespace's counter
	// moves on: the scripts that write it (Counter, Clear) start with it.
	//go:embed advance.lua
	advanceSrc string
	//go:embed counter.lua
	counterSrc string
	//go:embed clear.lua
	clearSrc string
)

// The per-key steps: a claim, its lease, its fill or abandonment, and the
// direct writes that take the lease away.
var (
	// Claim takes the lease for a compute and re-reads the value in the
	// same step. KEYS: value, lease. ARGV: token, lease TTL (ms). Reply:
	// {1, envelope or false} when claimed (a key of another Redis type reads
	// as ''; a claim run again with its own token is claimed), {0, the
	// holder's remaining ms} when another holder has the lease.
	Claim = redis.NewScript(claimSrc)

	// Extend prolongs a lease while its holder computes. KEYS: lease. ARGV:
	// token, lease TTL (ms). Reply: 1 when extended, 0 when the lease is
	// gone or another holder's.
	Extend = redis.NewScript(extendSrc)

	// Fill stores a computed value only while the writer holds its lease
	// (compare-and-set on its token), releases the lease, announces the
	// fill (with the envelope when it is small enough, else 'large') and
	// tells every replica's L1. KEYS: value, lease. ARGV: envelope, value
	// TTL (ms), token, channel, SPUBLISH flag, the largest envelope an
	// announcement carries (bytes), invalidation channel, invalidation
	// ("instance key"). Reply: {stored, other}: stored 1 when written,
	// other 1 when rejected because another holder has the lease; a
	// rejected fill announces 'rejected'.
	Fill = redis.NewScript(fillSrc)

	// Abandon gives up a lease without a value and wakes the waiters (it
	// announces 'abandon'). KEYS: lease. ARGV: token, channel, SPUBLISH
	// flag. Reply: 1 when released.
	Abandon = redis.NewScript(abandonSrc)

	// Set writes a value directly and takes the lease away, announces it
	// (with the envelope when small enough, else 'set') and tells every
	// replica's L1. KEYS: value, lease. ARGV: envelope, value TTL (ms),
	// channel, invalidation channel, invalidation ("instance key"),
	// SPUBLISH flag, the largest envelope an announcement carries (bytes).
	// Reply: 1 when a compute in flight lost its lease.
	Set = redis.NewScript(setSrc)

	// Delete deletes a value and takes the lease away, announces 'delete'
	// and tells every replica's L1. KEYS: value, lease. ARGV: channel,
	// invalidation channel, invalidation ("instance key"), SPUBLISH flag.
	// Reply: the number of values deleted.
	Delete = redis.NewScript(deleteSrc)

	// Expire replaces the value's envelope by one with its windows ended
	// (keeping its TTL), or deletes it when the new envelope is empty, only
	// when the value is still the one read; it takes the lease away,
	// announces 'delete' and tells every replica's L1. KEYS: value, lease.
	// ARGV: envelope read ('' for none), new envelope ('' to delete),
	// channel, invalidation channel, invalidation ("instance key"),
	// SPUBLISH flag. Reply: -1 when the value changed since it was read
	// (nothing done), 1 otherwise.
	Expire = redis.NewScript(expireSrc)
)

// The invalidation steps: marks and the namespace's counter.
var (
	// Mark raises one tag's mark to an invalidation's generation, never
	// lowering it. KEYS: the tag's mark {ns:tag}:t. ARGV: field ('h' hard,
	// 's' soft), the generation. Reply: the mark's value afterwards.
	Mark = redis.NewScript(markSrc)

	// Counter moves the namespace's invalidation counter on: to the
	// largest of G+step, floor+step and the server's clock (µs), never
	// lower. KEYS: {ns}:inv. ARGV: the caller's floor (the highest
	// generation it has seen), step (1 for an invalidation, 0 to restore a
	// counter found below the floor). Reply: the counter's new value.
	Counter = redis.NewScript(advanceSrc + counterSrc)

	// Clear invalidates a namespace: it moves the counter on (as Counter
	// with step 1), raises the namespace's own mark to the new value and
	// announces it on the invalidation channel. KEYS: {ns}:inv. ARGV: field
	// ('h' or 's'), invalidation channel, the announcement's prefix (the
	// generation and " *" are appended), the caller's floor. Reply: the new
	// generation.
	Clear = redis.NewScript(advanceSrc + clearSrc)
)
