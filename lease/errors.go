package lease

import "errors"

// Errors returned by this package. Causes from Redis are wrapped with them
// (test with errors.Is).
var (
	// ErrLeaseBusy means another holder has the lease (after any retries).
	ErrLeaseBusy = errors.New("lease: held by another owner")
	// ErrLeaseLost means the lease is no longer ours: it expired, or was
	// released, and may be held by another owner now. Nothing was changed.
	ErrLeaseLost = errors.New("lease: lost (expired or taken by another owner)")
	// ErrInvalidName means the lease name is empty or too long.
	ErrInvalidName = errors.New("lease: invalid name")
	// ErrInvalidTTL means a TTL is below a millisecond, or leaves no
	// validity after the clock drift allowance (see [Lease.Until]).
	ErrInvalidTTL = errors.New("lease: TTL must be at least 1ms")
	// ErrInvalidOptions means [Options] failed validation in [New].
	ErrInvalidOptions = errors.New("lease: invalid options")
	// ErrExtensionsExhausted is the cause of a [Client.Using] function's
	// context cancellation when the lease ran out after the last allowed
	// extension.
	ErrExtensionsExhausted = errors.New("lease: extensions exhausted, lease expired")
)

// ErrNoQuorum means fewer than a majority of a [Quorum]'s servers could be
// reached (or answered in time) for a step; see [QuorumError].
var ErrNoQuorum = errors.New("lease: no quorum of Redis servers")

// Errors that say why a step with Redis failed. Each server's error names
// the server by its address and wraps the cause (test with errors.Is).
var (
	// ErrUnavailable means no Redis server answered a step: a [Client]'s
	// server failed (refused the connection, or did not answer within
	// RedisTimeout), or none of a [Quorum]'s servers answered. A server
	// that answered with an error reply (Redis out of memory, a script
	// error) is not unavailable.
	ErrUnavailable = errors.New("lease: Redis unavailable")
	// ErrRedisTimeout means a server did not answer one step within its
	// budget ([Options].RedisTimeout, or [QuorumOptions].ServerTimeout):
	// the step stopped waiting for it, whatever the go-redis client's own
	// timeouts and retries are.
	ErrRedisTimeout = errors.New("lease: no answer in time")
)

// ErrServerRestarted is the error of a [Quorum] server whose grant did not
// count: it restarted less than the RestartQuarantine ago and has not taken
// a lease on the name since, so it may have lost a lease that is still
// valid (see the package documentation).
var ErrServerRestarted = errors.New("lease: Redis server started recently")
