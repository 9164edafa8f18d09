// Package lease is a Redis lease: a short-lived, fenced lock on a name that
// one process in a fleet holds at a time, over one Redis ([Client]) or by
// the Redlock algorithm over several independent Redis masters ([Quorum]),
// with leader election for periodic jobs on top ([Election]). It works on
// its own ("run this job on one replica") and is what
// [github.com/stampede-go/stampede/cache] uses to let one replica recompute
// an expired key.
//
// # One Redis
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
//
// # The validity deadline and the work
//
// The holder counts a lease's validity on its own clock from when it sent
// the acquisition or the last successful extension: TTL less the drift
// allowance, TTL × 1% + 2 ms for a [Client], TTL × DriftFactor + 2 ms for a
// [Quorum] ([Lease.Until]). Redis started the TTL when the request arrived,
// so the lease lasts there at least as long unless the server's clock runs
// faster than the allowance covers. No lease is handed out past its
// validity deadline: [Client.Acquire], [Client.AcquireMany] and
// [Quorum.Acquire] give back a grant whose reply came after it and return
// an error matching [ErrLeaseLost], and Using does not start the work then.
// [Lease.KeepAlive], Using and an [Election]'s term cancel the work's
// context at that deadline, not when an extension that is still out gives
// up; a late extension does not revive it. Every extension moves the
// deadline, the holder's own [Lease.Extend] included, and one to a shorter
// TTL brings it forward as soon as it is sent (Redis may take it before it
// answers). The work must stop within the allowance after its context is
// cancelled, and a holder that may be paused (a GC pause, a stopped VM)
// while it writes cannot rely on any deadline: that is what the fence is
// for. Mutual exclusion of the work therefore holds against holders that
// stop in time; writes are safe only where the resource checks the fence.
//
// # When Redis does not answer
//
// Every step with a server (an acquisition attempt, an extension, a
// release, each server's part of a quorum's round) is bounded by a budget,
// [Options].RedisTimeout ([QuorumOptions].ServerTimeout for a quorum), and
// by the caller's context, whatever the go-redis client's own timeouts,
// re-dials and retries are: the step runs on a goroutine of its own, and
// the caller stops waiting for it. A server that did not answer within the
// budget has failed with [ErrRedisTimeout]; each failed server's error
// names it by its address and wraps the cause, and [ErrUnavailable] says
// that no server answered at all (a Client's one server, or every server of
// a Quorum). A server that refuses connections (or whose host is unknown,
// or whose TLS handshake fails) costs nothing like a budget: go-redis would
// hide the failed dial behind its re-dials and retries, so a dial hook
// (added once per *redis.Client; for a *redis.ClusterClient or a
// *redis.Ring, to each node's client, except the nodes a Cluster had
// already made before [New] or [NewQuorum]; another [redis.Scripter] has
// the budget alone) ends the step at once with the dial's own error ("dial tcp 127.0.0.1:6379:
// connect: connection refused"), not ErrRedisTimeout, named by the
// server's address and, for a Client, matching [ErrUnavailable]. A quorum
// with a majority of its masters refusing connections fails at once. A
// server that accepts connections and does not answer (black-holed, hung)
// still costs its budget. A Cluster's or a Ring's failed dial to one node
// also ends its steps on other nodes that had no reply since they began.
// A step that the caller's context cut short fails with an error
// that matches the context's. A failed quorum acquisition takes at most two
// budgets, its grant and the release of what it may have taken, and never
// outlives the caller's context: when that ends first, Acquire returns at
// once, and the release goes on in the background for at most one budget,
// so that a cancelled caller leaves nothing held. [Election.Campaign]
// returns the cause of its context ending joined with the last attempt's
// failure.
//
// # A quorum of independent masters (Redlock)
//
// A [Quorum] is built from N clients, one per Redis master that shares
// nothing with the others; M = N/2 + 1 is a majority. The same two keys
// live on every server. An acquisition is two rounds, each sent to the
// servers at once, each server's reply bounded by ServerTimeout:
//
//  1. Grant (quorum_acquire.lua, atomic on each server): SET {N}:l token NX
//     PX ttl, and where that succeeded, read the server's fence floor,
//     max({N}:f, the server's clock in µs), and whether the server may have
//     lost a lease in a restart (below). The lease is granted when M
//     servers said yes, not counting such a server, and the validity,
//     TTL − elapsed − drift (drift = TTL × DriftFactor + 2 ms, elapsed
//     measured from before the first request was sent), is still positive.
//  2. Fence write-back (quorum_fence.lua, atomic on each server): F = the
//     largest floor the granting servers returned, plus one, is written to
//     {N}:f on each granting server — only where {N}:l still holds this
//     holder's token, and never lowering the key — and {N}:r records the
//     server's run_id. F is handed out only when M servers took it and the
//     validity is still positive.
//
// Any other outcome releases the lease wherever it is still the attempt's
// (token-checked) and fails: [*BusyError] when holders kept it, a
// [*QuorumError] (errors.Is [ErrNoQuorum]) when too few servers answered,
// [ErrLeaseLost] when the grant or the write-back came too late. Every
// attempt, retries included, has a random token of its own, and the
// release of a failed attempt goes to the servers that did not refuse its
// grant: where the grant is not (or not yet) there, it leaves a tombstone
// {N}:a:<token> for a TTL, which a grant of that token arriving later finds
// and takes nothing. Extend and
// Release run token-checked on every server and succeed on a majority (an
// extension, like the write-back, returns as soon as its outcome is known;
// the calls still out finish on their own).
// Extend reports [ErrLeaseLost] once more than N − M servers said "not
// ours", and a [*QuorumError] while too few answer (KeepAlive keeps trying
// until the validity deadline, then cancels the work with [ErrLeaseLost]).
//
// # Why the fences are ordered, case by case
//
// Say fence F_A is handed out to holder A: a set W_A of at least M servers
// took its write-back, each while {N}:l there held A's token. Let B be any
// holder whose grant on a majority G_B began after that. W_A and G_B are
// majorities of the same N, so they share a server s.
//
//   - B's grant on s needed {N}:l to be absent there, and A's write-back on
//     s needed it to hold A's token, so A's write-back on s came first; a
//     fence key is never lowered, so B read a floor ≥ F_A on s, and F_B ≥
//     F_A + 1. B's fence is strictly above every fence handed out before
//     its grant, whichever majority took it, without trusting any clock.
//   - Two holders whose attempts overlap in time: if both fences are handed
//     out, each of them was read on a server of the other's write-back set
//     or the other way round. F_B > F_A needs A's write-back before B's
//     read on one shared server, F_A > F_B needs B's write-back before A's
//     read on another; each write-back follows its own reads, so both
//     together would make a cycle in time. The two fences differ and are
//     ordered by their write-backs.
//   - A holder paused between the rounds (a GC pause, a stopped VM): its
//     grants may expire and B may take the lease. The write-back succeeds
//     only where A's token is still there; B holds a majority, so A reaches
//     at most N − M < M servers and gets no fence (Acquire fails with
//     [ErrLeaseLost] and releases what it still holds). If the pause ended
//     before a majority of A's grants expired, A's write-back reaches M
//     servers but A checks the validity afterwards: a pause past it makes
//     A refuse the lease all the same; the fence it wrote only raises the
//     floor that the next holder builds on.
//   - A holder paused after it got its fence, past its TTL: B's grant
//     needed A's lease gone on a majority, which shares a server with W_A,
//     so F_B > F_A (first case). Storage that keeps the highest fence it
//     saw rejects A's late write: UPDATE … SET fence = $new WHERE fence <
//     $new (examples/fencing shows it against PostgreSQL).
//   - A message of an earlier attempt that the network delays (the
//     attempt gave up, or succeeded and was released, before it arrived):
//     it carries that attempt's token, which no later attempt or holder
//     uses, so a late release or extension touches nothing of theirs, and a
//     late write-back finds the token gone (or, where a late grant of it
//     stands, only raises the floor). A late grant finds the attempt's
//     tombstone if the release came first, and otherwise is deleted by it;
//     a grant that stands for nobody can only make a server refuse others
//     for a TTL, never give two holders.
//   - Servers that crash (up to N − M): a grant and an extension need only
//     M answers, and every majority still meets every earlier write-back
//     set. The fence floor includes the server's clock, so a restarted
//     server's floor is not 0, and a majority's maximum still includes a
//     server that kept its data whenever fewer than M lost theirs.
//   - A server s that restarts without its data (no persistence, or a
//     snapshot older than the lease) has lost {N}:l, and a lease A granted
//     by exactly M servers, s among them, now holds on M − 1: plain Redlock
//     needs s to stay down for a TTL. Here the grant script reads s's uptime
//     and run_id (INFO server), and {N}:r, which every fence write-back sets
//     to the run_id of the server taking it: s "took part" when {N}:r holds
//     its current run_id (a restart changes the run_id, so a snapshot's old
//     {N}:r does not count). A yes from s does not count when s is up for
//     less than RestartQuarantine (default: the TTL), has not taken part
//     since it started, some server knows N ({N}:f or {N}:r is there) and
//     not every other server said yes. (A lease that still holds on M
//     servers without s leaves B too few others.) A's extensions can no
//     longer reach M, so its lease ends within its TTL of the restart, and
//     while it is valid s is younger than the quarantine; s takes no
//     write-back meanwhile, since only a counted grant is written back; and A's
//     servers that kept their data hold A's lease, so they either say no to
//     B or do not answer, and know N: B cannot count s whenever it reaches
//     one of them or any server that took an earlier lease on N. The case
//     left: B reaches none of A's other servers and no server it reaches
//     knows N, which takes a restart, B cut off from A's other servers, and
//     A's lease the first on N within FenceTTL to have been granted without
//     the servers B reaches. Persistence with appendfsync always removes
//     restarts that lose data (then set RestartQuarantine negative).
//     RestartQuarantine must be at least the longest TTL any holder gives N;
//     the uptime is the server's own clock reading, so one that steps
//     forward just after a restart shortens the quarantine. A name no server
//     knows counts every server at once (a new deployment); a server that
//     started less than the quarantine ago and has not taken a lease on a
//     known name counts once every server answers with none holding the
//     lease, or once its quarantine ends.
//   - A partition: the side with a majority can grant; the minority side
//     gets a [*QuorumError] or a [*BusyError] and holds nothing. A holder
//     cut off from its lease's majority cannot extend it and loses it when
//     the validity ends; whoever takes the lease next reads a server of the
//     old holder's write-back set.
//   - Clock drift: the holder counts the validity on its own clock from
//     before its first request, and allows TTL × DriftFactor + 2 ms for
//     servers whose clocks run faster; a lease never outlives its validity
//     by the holder's clock, and the work's context ends at the validity
//     deadline. The fences do not depend on any clock.
//   - Fence keys expire FenceTTL after their last write-back (default 24 h,
//     longer than any pause). After that the floor is the server's clock in
//     µs, still above any fence built on an earlier clock reading unless
//     the server's clock went back by more than the time since.
package lease
