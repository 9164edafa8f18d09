package robustness

// Window rounds: scripted sequences on keys of their own, next to the
// random traffic, for promises whose breach needs a key left alone longer
// than the random traffic ever leaves one (it writes, invalidates and
// clears every key several times a second). The checker judges their
// operations like any other: no property knows of rounds.

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/robustness/wire"
)

const (
	// abandonedKey is the key of the abandoned-key rounds: Set with
	// abandonTTL, untagged, left unread past TTL + max(Stale,
	// StaleIfError), then read by a Fetch whose compute fails.
	abandonedKey = "ka"
	// announcedKey is the key of the announcement rounds: Set on one
	// replica, read into the others' L1, Set again, read again past the
	// cross-replica window.
	announcedKey = "kl"
	// probeKey is the key the Gets sent at a fault's injection read
	// (probeGets): never written, so that no L1 answers them.
	probeKey = "kg"
	// standInKey and heldKey are the keys of the stand-in rounds: a
	// value of standInKey, tagged standInTag and expired, stands in for
	// a batch's failed compute while the batch waits for heldKey.
	standInKey, heldKey = "ks", "kh"
	standInTag          = "ts"
	// fencedKey is the key of the fence rounds, computed with fencedTag.
	fencedKey, fencedTag = "kf", "tf"
	// slowedKey is the key of the slowing rounds, computed with
	// slowedTag, its replica's marks reads slowed by slowedBy each way (a
	// round trip past δ, one way below it), after slowedQuiet.
	slowedKey, slowedTag = "kq", "tq"
	slowedBy             = 80 * time.Millisecond
	slowedQuiet          = 300 * time.Millisecond
	// pausedKey is the key of the pausing rounds, computed with
	// pausedTag; its replica's process is paused for pausedFor.
	pausedKey, pausedTag = "kp", "tp"
	pausedFor            = 700 * time.Millisecond
	// revalidatedKey is the route key of the revalidation rounds (an
	// anonymous request of route hr), tagged with revalidatedTag.
	revalidatedKey, revalidatedTag = "hr|", "route-hr"
)

const (
	// fencePad is the padding of a fence round's value: the slow codec
	// encodes it in 300 ms (1 ms per 2 KiB), the window in which the
	// round's InvalidateTags returns.
	fencePad = 600 << 10
	// fenceInto is how long after its compute ended a fence round's
	// InvalidateTags starts: the replica has checked the value's marks
	// and is encoding it.
	fenceInto = 30 * time.Millisecond
)

// standInHold is how long the stand-in round's compute of heldKey runs.
const standInHold = 400 * time.Millisecond

// abandonTTL is the TTL an abandoned key is written with: short, so that
// its windows end within a round.
const abandonTTL = 100 * time.Millisecond

// roundMargin is how long past the end of the window a round judges its
// key: the announcement's or the entry's expiry on a loaded machine.
const roundMargin = 300 * time.Millisecond

// roundPause is the mean pause between two rounds.
const roundPause = 2 * time.Second

// trackOpening is how long a round gives a replica's L1 to subscribe a
// key's channel after its second read (one round trip on the pub/sub
// connection; more under the latency nemeses).
const trackOpening = 100 * time.Millisecond

// crossReplica is the documented cross-replica read window without a
// fault (checker.crossWindow).
const crossReplica = 500 * time.Millisecond

// allGroups are the tags of every tag group: an InvalidateTags of them
// all stands in for a Clear while a round holds the Clear gate (every
// compute key but the calm one carries one of them).
func allGroups() []string {
	out := make([]string, groups)
	for i := range out {
		out[i] = fmt.Sprintf("g%d", i)
	}
	return out
}

// rounds runs the scenario's window rounds (Traffic.Slow, Traffic.Abandon,
// Traffic.Announce, Traffic.StandIn, Traffic.Revalidate, Traffic.Pause,
// Traffic.Fence), in that order, one at a time with a pause between two, until end.
func (r *run) rounds(rng *rand.Rand, end time.Time) {
	var kinds []func(*rand.Rand) time.Duration
	if r.sc.Traffic.Slow && r.sc.Options.SlowCodec && r.sc.Mode == "redis" && r.sc.Replicas > 1 {
		kinds = append(kinds, r.slowRound) // first: the run's first fault holds it back
	}
	if r.sc.Traffic.Abandon && r.sc.Options.StaleIfError > 0 {
		kinds = append(kinds, r.abandonRound)
	}
	if r.sc.Traffic.Announce && r.sc.Options.L1Size > 0 && r.sc.Mode != "local" && r.sc.Replicas > 1 {
		kinds = append(kinds, r.announceRound)
	}
	if r.sc.Traffic.StandIn && r.sc.Options.StaleIfError > 0 {
		kinds = append(kinds, r.standInRound)
	}
	if r.sc.Traffic.Revalidate && r.sc.Options.StaleIfError > 0 {
		kinds = append(kinds, r.revalidateRound)
	}
	if r.sc.Traffic.Pause && r.sc.Options.SlowCodec && r.sc.Mode == "redis" && r.sc.Replicas > 1 {
		kinds = append(kinds, r.pauseRound) // before the fence rounds: the longer round first, while the run has room for it
	}
	if r.sc.Traffic.Fence && r.sc.Options.SlowCodec && r.sc.Mode != "local" && r.sc.Replicas > 1 {
		kinds = append(kinds, r.fenceRound)
	}
	for i := 0; len(kinds) > 0; i++ {
		pause := roundPause/2 + time.Duration(rng.Int64N(int64(roundPause)))
		time.Sleep(pause) // the rounds' schedule, not a wait for an event
		round := kinds[i%len(kinds)]
		if time.Now().Add(round(nil)).After(end) {
			return
		}
		round(rng)
	}
}

// abandonRound (rng nil: how long it takes, at most, but its calls) writes
// abandonedKey on one replica with abandonTTL and, past TTL + max(Stale,
// StaleIfError) after the Set returned, reads it there with a compute
// that fails. The store keeps the value no longer than that window, so the
// Fetch must answer the origin's error: a value standing in for it is a
// freshness violation (an entry kept too long, the error-window-x4 plant).
// No Clear may wipe the key meanwhile: the round holds the Clear gate.
func (r *run) abandonRound(rng *rand.Rand) time.Duration {
	window := abandonTTL + max(r.sc.Options.Stale, r.sc.Options.StaleIfError) + roundMargin
	if rng == nil {
		return window + 2*r.sc.Traffic.Deadline
	}
	rep := r.roundReplica(rng)
	if rep == nil {
		return 0
	}
	defer r.clears.Unlock()
	if !r.roundCall(rep, wire.Request{Op: wire.OpSet, Key: abandonedKey, SetTTL: abandonTTL}).Ok() {
		return 0
	}
	time.Sleep(window) // past the value's last window: what is judged is the store's expiry
	r.roundCall(rep, wire.Request{Op: wire.OpFetch, Key: abandonedKey, Compute: wire.Compute{Fail: true}})
	return 0
}

// announceRound (rng nil: how long it takes, at most) writes announcedKey
// on one replica, reads it on the others (into their L1: a key's second
// read there subscribes its channel, and a read begun once Redis confirmed
// that, trackOpening later, is put), writes it again,
// and reads it on the others once more past the cross-replica window: the
// write's announcement must have dropped the first value from their L1
// (the l1-ignores-announcements plant keeps it until L1TTL). A replica
// the replica-idle nemesis keeps quiet is left out. No Clear may drop the
// key from L1 meanwhile: the round holds the Clear gate.
func (r *run) announceRound(rng *rand.Rand) time.Duration {
	if rng == nil {
		return crossReplica + roundMargin + trackOpening + 2*r.sc.Traffic.Deadline
	}
	writer := r.roundReplica(rng)
	if writer == nil {
		return 0
	}
	defer r.clears.Unlock()
	set := func() bool {
		return r.roundCall(writer, wire.Request{Op: wire.OpSet, Key: announcedKey, SetTTL: time.Hour}).Ok()
	}
	readAll := func() {
		for _, rep := range r.env.replicas {
			if rep == writer || rep.idle() {
				continue
			}
			r.roundCall(rep, wire.Request{Op: wire.OpGet, Key: announcedKey})
		}
	}
	if !set() {
		return 0
	}
	readAll()
	readAll()
	time.Sleep(trackOpening)
	readAll()
	if !set() {
		return 0
	}
	time.Sleep(crossReplica + roundMargin) // past the window in which the others may still answer the first value
	readAll()
	return 0
}

// standInRound (rng nil: how long it takes, at most) makes a batch hold
// a value standing in for its failed compute across an ExpireTags: on one
// replica, standInKey is computed with standInTag and expired
// (ExpireTags), so that it is kept for errors (StaleIfError); a compute of
// heldKey runs for standInHold; a batch of heldKey and standInKey, whose
// compute fails once, finds standInKey's value standing in for its failure
// and waits for heldKey; an ExpireTags of standInTag returns meanwhile.
// The stand-in is older than that ExpireTags and its failure came before
// it: the batch must compute standInKey again (and its compute now
// succeeds), not answer the stand-in (an invalidation violation: the
// batch-standin-unfenced plant). The pauses order the round's calls on a
// quiet machine; on a loaded one they may come in another order, which
// only judges another history. No Clear may drop the key meanwhile: the
// round holds the Clear gate.
func (r *run) standInRound(rng *rand.Rand) time.Duration {
	if rng == nil {
		return standInHold + 2*r.sc.Traffic.Deadline
	}
	rep := r.roundReplica(rng)
	if rep == nil {
		return 0
	}
	defer r.clears.Unlock()
	expire := func() bool {
		return r.roundCall(rep, wire.Request{Op: wire.OpExpireTags, Tags: []string{standInTag}}).Ok()
	}
	tagged := wire.Compute{Tags: []string{standInTag}}
	if !r.roundCall(rep, wire.Request{Op: wire.OpDelete, Key: heldKey}).Ok() ||
		!r.roundCall(rep, wire.Request{Op: wire.OpGetOrCompute, Key: standInKey, Compute: tagged}).Ok() || !expire() {
		return 0
	}
	var calls sync.WaitGroup
	calls.Go(func() {
		r.roundCall(rep, wire.Request{Op: wire.OpGetOrCompute, Key: heldKey, Compute: wire.Compute{Sleep: standInHold}})
	})
	time.Sleep(standInHold / 8) // the round's order: heldKey's compute first
	failOnce := tagged
	failOnce.FailOnce = true
	calls.Go(func() {
		r.roundCall(rep, wire.Request{Op: wire.OpGetOrComputeMany, Keys: []string{heldKey, standInKey}, Compute: failOnce})
	})
	time.Sleep(standInHold / 4) // then the batch's failure, then the ExpireTags
	expire()
	calls.Wait()
	return 0
}

// fenceRound (rng nil: how long it takes, at most) computes fencedKey
// with fencedTag on one replica, its value padded so that the slow codec
// takes fencePad/2 KiB milliseconds to encode it, and meanwhile (fenceInto
// after the origin heard the compute end: the value passed its own
// invalidation check and is being encoded for its fill) has another
// replica InvalidateTags fencedTag. That call returns (it waits δ) before the value is stored:
// the answer's fence must find the invalidation and compute again, not
// answer the value computed before it (an invalidation violation: the
// fence-skipped-at-answer plant). The random traffic opens that window
// one run in two. Each round deletes the key first, so that its Fetch
// computes. No Clear may wipe the tag's mark meanwhile: the round holds
// the Clear gate.
func (r *run) fenceRound(rng *rand.Rand) time.Duration {
	if rng == nil {
		// The Fetch's deadline (the Delete before it is one step): the
		// scenario's runs are short, and a round that began too late
		// for a bound of two deadlines would leave many without one.
		return r.sc.Traffic.Deadline
	}
	rep := r.roundReplica(rng)
	if rep == nil {
		return 0
	}
	defer r.clears.Unlock()
	var other *Replica
	for _, o := range r.env.replicas {
		if o != rep && !o.idle() {
			other = o
		}
	}
	if other == nil || !r.roundCall(rep, wire.Request{Op: wire.OpDelete, Key: fencedKey}).Ok() {
		return 0
	}
	ended := r.origin.nextEnd(fencedKey)
	var fetch sync.WaitGroup
	fetch.Go(func() {
		r.roundCall(rep, wire.Request{Op: wire.OpFetch, Key: fencedKey,
			Compute: wire.Compute{Sleep: 20 * time.Millisecond, Tags: []string{fencedTag}, Pad: fencePad}})
	})
	select {
	case <-ended:
		time.Sleep(fenceInto) // the round's order: the value checked, and being encoded
		r.roundCall(other, wire.Request{Op: wire.OpInvalidateTags, Tags: []string{fencedTag}})
	case <-time.After(r.sc.Traffic.Deadline): // the Fetch failed before a compute
	}
	fetch.Wait()
	return 0
}

// slowRound (rng nil: how long it takes, at most) is issue 39 item 2's
// class: a fence that must read the invalidation marks from a Redis that
// just turned slow for them, within δ one way. As the fence rounds do, one
// replica computes slowedKey with slowedTag, its value padded so that the
// slow codec takes a while to encode it, and once the compute ended and
// its own check passed, another replica's InvalidateTags of slowedTag
// returns while the value is encoded; meanwhile the replica's marks reads
// (HMGET) turn slowedBy slower each way (as a Cluster master that holds
// the namespace's marks turns slow while the others stay fast). The
// replica is kept quiet (the suite sends it nothing else) and its
// subscriptions silent (no announcement, no heartbeat's answer: the marks
// are trusted by reads alone), so that the answer's fence is the first
// read to meet the slowness, with nothing having taught the budget the
// marks' new round trip. The answer must not be the value computed before
// the InvalidateTags: the marks' read must wait for its late reply
// (RunPatient) rather than be cut at its bound (the marks-read-impatient
// plant). The round holds the nemesis off meanwhile (faults) and records
// its fault as latency-unsubscribed's.
func (r *run) slowRound(rng *rand.Rand) time.Duration {
	if rng == nil {
		// Its own calls: the wait for the nemesis' fault to heal comes
		// first, and may take the run past its end by up to a fault.
		return slowedQuiet + r.sc.Traffic.Deadline
	}
	q, ok := r.quietRound(rng)
	if !ok {
		return 0
	}
	defer q.end()
	rep, p, other, call := q.rep, q.proxy, q.other, q.call
	// Recorded as the nemesis of the same fault records it: a slow link
	// (nothing excused that a slow Redis does not excuse), announcements
	// lost on that replica.
	r.hist.event(r.clock.now(), fmt.Sprintf("latency-unsubscribed: %s silent on its subscriptions, its marks reads delayed %s each way (a slowing round)", rep.Name, slowedBy), false)
	p.SetPubSubSilent(true)
	defer func() {
		p.SetSlowCommand("", 0)
		p.SetPubSubSilent(false)
		r.hist.event(r.clock.now(), "latency-unsubscribed: healed", true)
	}()
	if !call(wire.Request{Op: wire.OpDelete, Key: slowedKey}).Ok() {
		return 0
	}
	ended := r.origin.nextEnd(slowedKey)
	var fetch sync.WaitGroup
	fetch.Go(func() {
		call(wire.Request{Op: wire.OpFetch, Key: slowedKey,
			Compute: wire.Compute{Sleep: 20 * time.Millisecond, Tags: []string{slowedTag}, Pad: fencePad}})
	})
	select {
	case <-ended:
		time.Sleep(fenceInto) // the round's order: the value checked, and being encoded
		p.SetSlowCommand("hmget", slowedBy)
		r.roundCall(other, wire.Request{Op: wire.OpInvalidateTags, Tags: []string{slowedTag}})
	case <-time.After(r.sc.Traffic.Deadline): // the Fetch failed before a compute
	}
	fetch.Wait()
	return 0
}

// quiet is a round on one replica kept quiet (the suite sends it nothing
// but the round's calls) with another replica beside it, the nemesis held
// off and the Clear gate held (slowRound, pauseRound).
type quiet struct {
	rep, other *Replica
	proxy      *faultproxy.Proxy // rep's link to Redis
	call       func(wire.Request) *Op
	end        func()
}

// quietRound draws the replica of a quiet round and another, waits for
// the nemesis' fault to heal, and quiets the replica (slowedQuiet: its
// calls in flight end); false when a replica is kept idle.
func (r *run) quietRound(rng *rand.Rand) (quiet, bool) {
	i := rng.IntN(len(r.env.replicas))
	rep, p := r.env.replicas[i], r.env.proxies[i]
	var other *Replica
	for _, o := range r.env.replicas {
		if o != rep && !o.idle() {
			other = o
		}
	}
	if rep.idle() || other == nil {
		return quiet{}, false
	}
	r.faults.Lock()
	r.clears.Lock()
	rep.Quiet()
	time.Sleep(slowedQuiet) // the round's schedule: the replica's calls in flight end
	return quiet{rep: rep, other: other, proxy: p,
		call: func(req wire.Request) *Op { // on the quiet replica: not held back
			req.ID, req.Deadline = r.nextID.Add(1), r.sc.Traffic.Deadline
			return r.do(rep, req, false)
		},
		end: func() {
			rep.Unquiet()
			r.clears.Unlock()
			r.faults.Unlock()
		}}, true
}

// pauseRound (rng nil: how long it takes, at most) is issue 39 item 10's
// class on the fence: a process starved of CPU while its answer's fence
// reads the marks. As slowRound does, one quiet replica, its subscriptions
// silent (the marks trusted by reads alone), computes pausedKey with
// pausedTag, its value padded for the slow codec; once the compute ended
// and its own check passed, the replica's proxy waits for its next marks
// read (HMGET: the answer's fence) and, before it forwards that read,
// pauses the replica's process (SIGSTOP) for pausedFor, longer than the
// fence's two reads' bounds. Redis answers the read (no mark yet) into the
// paused process's socket, another replica's InvalidateTags of pausedTag
// returns meanwhile, and the process resumes with its read's bound long
// past: the read's failure was this process's starvation, not Redis'
// silence. The answer must not be the value computed before the
// InvalidateTags: the fence must read again, not give up after two bounds
// and let the answer through unchecked (the fence-gives-up-under-load plant).
// Recorded as a stall of that replica, from its subscriptions' silence to
// its resumption: unlike a replica-pause, it excuses no degraded answer
// and no unchecked fence (a starved process is not cut off from Redis),
// only missed deadlines and what a paused lease holder breaks.
func (r *run) pauseRound(rng *rand.Rand) time.Duration {
	if rng == nil {
		return slowedQuiet + pausedFor + r.sc.Traffic.Deadline
	}
	q, ok := r.quietRound(rng)
	if !ok {
		return 0
	}
	defer q.end()
	rep, p := q.rep, q.proxy
	r.hist.event(r.clock.now(), fmt.Sprintf("stall: %s silent on its subscriptions, then its process stopped at its fence's marks read for %s (a pausing round)", rep.Name, pausedFor), false)
	p.SetPubSubSilent(true)
	var mu sync.Mutex
	over, paused := false, make(chan time.Time, 1)
	// disarm ends the round's hold on the replica: no pause from now on,
	// and one the hook made meanwhile is ended.
	disarm := func() {
		p.OnCommand("", nil)
		mu.Lock()
		over = true
		mu.Unlock()
		select {
		case <-paused:
			_ = rep.Resume()
		default:
		}
	}
	defer func() {
		disarm()
		p.SetPubSubSilent(false)
		r.hist.event(r.clock.now(), "stall: healed", true)
	}()
	if !q.call(wire.Request{Op: wire.OpDelete, Key: pausedKey}).Ok() {
		return 0
	}
	ended := r.origin.nextEnd(pausedKey)
	var fetch sync.WaitGroup
	fetch.Go(func() {
		q.call(wire.Request{Op: wire.OpFetch, Key: pausedKey,
			Compute: wire.Compute{Sleep: 20 * time.Millisecond, Tags: []string{pausedTag}, Pad: fencePad}})
	})
	select {
	case <-ended:
		time.Sleep(fenceInto) // the round's order: the value checked, and being encoded
		p.OnCommand("hmget", func() {
			mu.Lock()
			defer mu.Unlock()
			if !over && rep.Pause() == nil {
				paused <- time.Now()
			}
		})
		select {
		case at := <-paused:
			r.roundCall(q.other, wire.Request{Op: wire.OpInvalidateTags, Tags: []string{pausedTag}})
			time.Sleep(time.Until(at.Add(pausedFor))) // the fault's length
			_ = rep.Resume()
		case <-time.After(r.sc.Traffic.Deadline): // no marks read: the fence was vouched for otherwise
		}
	case <-time.After(r.sc.Traffic.Deadline): // the Fetch failed before a compute
	}
	disarm() // before the wait: a pause the hook made meanwhile would hold the Fetch
	fetch.Wait()
	return 0
}

// revalidateRound (rng nil: how long it takes, at most) stores a route
// response tagged with the surrogate key revalidatedTag on one replica,
// requests it again once past its freshness and its stale window (the
// middleware keeps it for StaleIfError and revalidates it: the handler
// answers its If-None-Match with a 304, which freshens the stored
// response), purges revalidatedTag, and requests it once more. The 304
// keeps every stored header field, the surrogate keys among them (RFC
// 9111 §4.3.4): the purge must reach the freshened response, and the last
// request run the handler, not answer the response from before the purge
// (an invalidation violation: the http-304-drops-surrogate-keys plant).
// The random traffic revalidates a route response seldom and purges it
// within its freshness seldomer. The round holds the Clear gate (which
// a purge does not need) as every round does.
func (r *run) revalidateRound(rng *rand.Rand) time.Duration {
	pastStale := r.sc.Options.TTL + r.sc.Options.Stale + roundMargin
	if rng == nil {
		// One call's deadline: the four answer within milliseconds on a
		// healthy Redis, and a bound of every deadline would leave the
		// scenario's runs without a round once an abandoned-key round ran.
		return pastStale + r.sc.Traffic.Deadline
	}
	rep := r.roundReplica(rng)
	if rep == nil {
		return 0
	}
	defer r.clears.Unlock()
	tags := []string{revalidatedTag}
	get := func(c wire.Compute) bool {
		return r.roundCall(rep, wire.Request{Op: wire.OpHTTPGet, Key: revalidatedKey, Tags: tags, Compute: c}).Ok()
	}
	if !r.roundCall(rep, wire.Request{Op: wire.OpHTTPPurge, Tags: tags}).Ok() || !get(wire.Compute{}) {
		return 0
	}
	time.Sleep(pastStale) // the response's freshness and stale window run out: what is judged is its revalidation
	if !get(wire.Compute{Unchanged: true}) || !r.roundCall(rep, wire.Request{Op: wire.OpHTTPPurge, Tags: tags}).Ok() {
		return 0
	}
	get(wire.Compute{})
	return 0
}

// roundCall sends req, numbered and with the traffic's deadline, to rep
// once rep may take it (replica-idle, replica-sparse).
func (r *run) roundCall(rep *Replica, req wire.Request) *Op {
	rep.waitActive()
	req.ID, req.Deadline = r.nextID.Add(1), r.sc.Traffic.Deadline
	return r.do(rep, req, false)
}

// roundReplica draws the replica a round runs on and takes the Clear gate
// for the round (the caller lets it go); nil, without the gate, when the
// replica is kept idle.
func (r *run) roundReplica(rng *rand.Rand) *Replica {
	rep := r.env.replicas[rng.IntN(len(r.env.replicas))]
	if rep.idle() {
		return nil
	}
	r.clears.Lock()
	return rep
}

// fillPools has every replica send poolFill Gets at once, each of its own
// never-written key (the Gets of one key would share one read), and waits
// for them: each replica's pools then hold that many idle connections, as
// after a burst. Before a vanish, so that the pools it leaves full of dead
// connections are full (the dead-conn-not-retried plant: a step that meets
// two dead ones in a row, go-redis' one retry spent, fails).
func (r *run) fillPools() {
	var wg sync.WaitGroup
	for _, rep := range r.env.replicas {
		if rep.idle() {
			continue
		}
		for i := range poolFill {
			wg.Go(func() {
				r.do(rep, wire.Request{ID: r.nextID.Add(1), Op: wire.OpGet, Key: probeKey + strconv.Itoa(i), Deadline: r.sc.Traffic.Deadline}, false)
			})
		}
	}
	wg.Wait()
}

// poolFill is how many Gets fillPools sends each replica at once.
const poolFill = 8

// failsRedis reports whether a nemesis makes Redis fail the calls of the
// replicas it reaches (rather than slow them within the budget).
func failsRedis(kind string) bool {
	switch kind {
	case "redis-kill", "redis-kill-vanish", "redis-pause", "partition":
		return true
	}
	return false
}

// probeGets sends Gets of probeKey to every replica as a fault that makes
// Redis fail begins, one after another on each replica until one finds
// the breaker open (or probesPerFault were sent): those before it reached
// Redis and must fail with a documented error (the get-raw-error plant
// returns go-redis' own). A killed Redis first times the calls in flight
// out (a documented ErrRedisTimeout), then refuses the next ones (EOF
// through the replica's proxy: raw, unless wrapped); the random traffic's
// Gets meet that moment one run in two.
//
// When Redis refuses connections (kind redis-kill), each replica that found
// its breaker open then goes on sending Gets close together until Redis
// answers one (the heal) or refusedGets were sent, so that one of them is
// likely the call that finds a cooldown over and waits for the probe's
// verdict: the probe's refused dial must answer it at once
// (refusedOutageCost; the probe-waits-past-refusal plant waits out a
// budget there).
func (r *run) probeGets(calls *sync.WaitGroup, kind string) {
	get := func(rep *Replica) *Op {
		return r.do(rep, wire.Request{ID: r.nextID.Add(1), Op: wire.OpGet, Key: probeKey, Deadline: r.sc.Traffic.Deadline}, false)
	}
	for _, rep := range r.env.replicas {
		if rep.idle() {
			continue
		}
		calls.Go(func() {
			for range probesPerFault {
				op := get(rep)
				if op.Unknown || op.Resp.Err == "" {
					return
				}
				if op.Resp.Err == wire.ErrUnavailable && strings.Contains(op.Resp.ErrText, "breaker open") {
					for range refusedGets {
						if kind != "redis-kill" {
							break
						}
						if op := get(rep); op.Unknown || op.Resp.Err == "" {
							break
						}
						time.Sleep(probeGap / 2) // pacing
					}
					return
				}
				time.Sleep(probeGap) // pacing the probes of a fault's first moments, not a wait for an event
			}
		})
	}
}

const (
	// probesPerFault bounds the Gets probeGets sends each replica.
	probesPerFault = 6
	// probeGap is the pause between two of them.
	probeGap = 20 * time.Millisecond
	// refusedGets bounds the Gets sent, probeGap/2 apart, once the breaker
	// is open while Redis refuses connections.
	refusedGets = 150
)
