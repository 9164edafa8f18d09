// Package lease is a Redis recompute lease: a short-lived, fenced lock on a
// name that one process in a fleet holds at a time. It works on its own
// ("run this job on one replica") and is what [github.com/stampede-go/stampede/cache]
// uses to let one replica recompute an expired key.
//
// A lease on name N lives in two Redis keys that share the hash tag {N}, so
// they sit in one Cluster slot and every script touches one slot:
//
//	{N}:l  the holder's random 128-bit token, with the lease TTL
//	{N}:f  the fence, moved on by every acquisition to max(previous + 1, server clock in µs)
//
// Acquire, Release and Extend are single Lua scripts. Release and Extend
// compare the token first, so a holder whose lease expired and was taken by
// another cannot release or extend the new holder's lease: it gets
// [ErrLeaseLost] and nothing is touched. The fencing token ([Lease.Fence])
// rises with every acquisition; storage that records the highest fence it
// has seen can reject writes from a holder that was paused past its TTL.
package lease
