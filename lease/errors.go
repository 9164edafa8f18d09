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
