package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/cache/internal/redisstep"
)

// KeyErrors holds the keys of a [Cache.GetOrComputeMany] that got no value,
// with why. It matches each of its errors with errors.Is and errors.As.
type KeyErrors map[string]error

// Error lists the failed keys.
func (e KeyErrors) Error() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "cache: %d key(s) without a value:", len(keys))
	for i, k := range keys {
		if i == 5 {
			fmt.Fprintf(&b, " ... (%d more)", len(keys)-5)
			break
		}
		fmt.Fprintf(&b, " %q: %v;", k, e[k])
	}
	return b.String()
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (e KeyErrors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, err := range e {
		out = append(out, err)
	}
	return out
}

// ErrMissingFromBatch is the error of a key that a GetOrComputeMany compute
// function left out of its result. Nothing is cached for it.
var ErrMissingFromBatch = errors.New("cache: key missing from the batch compute's result")

// GetOrComputeMany returns the values of keys, computing the missing ones
// with one call of fn. Each key goes through the same steps as
// [Cache.GetOrCompute] (freshness, stale serving and refresh, the claim,
// waiting for another replica, stale-if-error, the fence), with the round
// trips shared: one read for all keys (MGET, or a pipeline on a Cluster),
// one pipelined claim attempt for the missing ones, one fn call for the
// keys this caller won (fn is given only those), one pipelined fill. Keys
// another replica is computing are waited for (fn is then called for such
// a key alone if the wait ends without a value). [SetTTL] and [SetStale]
// inside fn apply to every key of that call.
//
// The batch answers its caller once, when every key has an answer, and
// the invalidation fence is judged then, for every value it hands back: a
// key's value whose compute began before an InvalidateTags (ExpireTags,
// Clear) that returned while the batch still waited for other keys is
// loaded again, as a GetOrCompute's would be; so is a value standing in
// for its failed compute (stale-if-error), which ExpireTags otherwise
// lets through, when that ExpireTags came after the batch read the key.
//
// The map holds every key that has a value; keys without one are in the
// [KeyErrors] returned (a key fn left out gets [ErrMissingFromBatch]). ctx
// bounds the call: when it ends, the keys without a value yet get its
// error, and the computes already started go on in the background and fill.
// The values already in hand are then judged by what this process knows
// of the invalidations, without a round trip: one it cannot vouch for
// gets ctx's error too.
func (c *Cache[V]) GetOrComputeMany(ctx context.Context, keys []string, fn func(ctx context.Context, missing []string) (map[string]V, error)) (map[string]V, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if fn == nil {
		return nil, ErrNilFunc
	}
	b := &batch[V]{got: make(map[string]batchAnswer[V], len(keys)), errs: KeyErrors{}}
	var version uint64
	if c.l1 != nil {
		version = c.l1.version()
	}
	var todo []string // may repeat a key: reads do not mind, misses are deduplicated in many
	for _, k := range keys {
		if err := c.check(k); err != nil {
			b.errs[k] = err
			continue
		}
		if c.l1 != nil {
			now := c.now()
			if e, ok := c.l1get(ctx, k, now); ok && !e.negative {
				b.got[k] = batchAnswer[V]{value: e.value, outcome: Hit, stamp: e.stamp, kept: e.kept, l1: true}
				if c.l1Early(e, now) {
					c.refreshAsync(k, e, fn)
				}
				continue
			}
		}
		todo = append(todo, k)
	}
	switch {
	case len(todo) == 0:
		b.fenced = true // every answer was judged just now
	case ctx.Err() != nil:
		b.giveUp(todo, context.Cause(ctx))
	case ctx.Done() == nil: // never cancelled: nothing to bound, no goroutine to pay for
		c.many(ctx, todo, version, fn, b)
	default:
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.many(ctx, todo, version, fn, b)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			b.giveUp(todo, context.Cause(ctx))
		}
	}
	return c.batchResult(ctx, b)
}

// batch collects a GetOrComputeMany's answers until it answers its
// caller; once the caller gave up, no more are taken.
type batch[V any] struct {
	mu sync.Mutex
	// got are the keys answered by a load (a value, a cached "not
	// found", or an error that came with an outcome): counted and handed
	// out when the batch answers (Cache.batchResult), after the fence.
	got  map[string]batchAnswer[V]
	errs KeyErrors
	// closed: the caller has its answer, or gave up; nothing more is taken.
	closed bool
	// fenced: every answer in got passed the invalidation fence after the
	// last of them came (Cache.many's end, or all judged at once).
	fenced bool
	// refused are the keys whose load's answer the invalidation fence
	// refused (see Cache.deliver): to be loaded again.
	refused []string
}

// batchAnswer is one key's answer in a batch, a load's or an L1 hit's
// (counted as one): what the fence and the outcome's count need of it.
type batchAnswer[V any] struct {
	value    V
	outcome  Outcome
	negative bool
	standIn  bool // a value standing in for a failed or slow compute (Result.Err set)
	kept     bool
	l1       bool
	stamp    marks.Stamp
	err      error
	// floor is the highest invalidation generation this process had seen
	// (marks.Floor) before the answer's value was chosen: a stand-in is
	// refused by a soft invalidation it learnt of after it (answerState).
	floor uint64
}

// answerOf is the batch's record of a load's answer l, err, chosen after
// this process had seen invalidations up to floor.
func answerOf[V any](l loaded[V], err error, floor uint64) batchAnswer[V] {
	return batchAnswer[V]{value: l.value, outcome: l.outcome, negative: l.negative, standIn: l.cause != nil,
		kept: l.kept, stamp: l.stamp, err: err, floor: floor}
}

// loaded is a as the fence (fenceState) judges it.
func (a batchAnswer[V]) loaded() loaded[V] {
	l := loaded[V]{value: a.value, outcome: a.outcome, negative: a.negative, kept: a.kept, stamp: a.stamp}
	if a.standIn {
		l.cause = errStandIn
	}
	return l
}

// errStandIn marks a batch's answer that stood in for a failed or slow
// compute, for the fence (batchAnswer.loaded).
var errStandIn = errors.New("cache: a value standing in for a compute")

// record records key's answer from a load: l and err, or err alone when
// l has no outcome; floor is the marks' Floor read before l's value was
// chosen (see batchAnswer.floor).
func (b *batch[V]) record(key string, l loaded[V], err error, floor uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if l.outcome == 0 && err != nil {
		b.errs[key] = err
		delete(b.got, key)
		return
	}
	b.got[key] = answerOf(l, err, floor)
	delete(b.errs, key)
}

// fail records err as key's answer.
func (b *batch[V]) fail(key string, err error) { b.record(key, loaded[V]{}, err, 0) }

// refuse notes that key's answer was refused by the invalidation fence.
func (b *batch[V]) refuse(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.refused = append(b.refused, key)
		delete(b.got, key)
	}
}

// drop takes the answers of keys away (the fence refused them), unless
// the batch was closed.
func (b *batch[V]) drop(keys []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		for _, k := range keys {
			delete(b.got, k)
		}
	}
}

// takeRefused returns the keys refused since the last call.
func (b *batch[V]) takeRefused() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := b.refused
	b.refused = nil
	return keys
}

// giveUp answers every key still without an answer with err, and takes no
// more answers.
func (b *batch[V]) giveUp(keys []string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, k := range keys {
		_, ok := b.got[k]
		if _, failed := b.errs[k]; !ok && !failed {
			b.errs[k] = err
		}
	}
}

// markFenced notes that every answer passed the fence just now.
func (b *batch[V]) markFenced() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.fenced = true
	}
}

// fenceBatch judges every answer b holds against the invalidation fence
// (fenceState) at this moment, the batch's answer's, and returns the keys
// it refuses. A value that passed the fence when its key got its answer
// may not pass it now: an invalidation may have returned while the batch
// waited for its other keys. Each answer is judged first by what this
// process knows of the marks (no copy, no round trip: a batch of hits
// whose marks are vouched for costs a check in memory per key); those
// whose marks must be read again are judged after, with ctx, unless
// strict, which refuses them (marks.Unknown) rather than wait. Each is
// judged by answerState: a value standing in for a failed compute is
// refused by a soft invalidation too, when this process learnt of it after
// that compute's attempt began.
func (c *Cache[V]) fenceBatch(ctx context.Context, b *batch[V], strict bool) []string {
	quick, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	cancel(errNoMarksRead)
	var refused, unsure []string
	var later []batchAnswer[V]
	b.mu.Lock()
	for k, a := range b.got {
		switch c.answerState(quick, a) {
		case marks.Valid:
		case marks.Unknown:
			if strict {
				refused = append(refused, k)
			} else {
				unsure, later = append(unsure, k), append(later, a)
			}
		default:
			refused = append(refused, k)
		}
	}
	b.mu.Unlock()
	for i, a := range later {
		if st := c.answerState(ctx, a); st == marks.Hard || st == marks.Soft {
			refused = append(refused, unsure[i])
		}
	}
	return refused
}

// answerState is fenceState for a batch's answer a, at the batch's
// answer. fenceState lets a value standing in for a failed or slow compute
// (stale-if-error, SoftTimeout, a fail-safe value) through a soft
// invalidation: ExpireTags leaves it usable for a compute that fails. A
// batch holds such a value while it waits for its other keys: a soft
// invalidation this process learnt of after the value's attempt began
// (above a.floor) came after the compute it stood in for failed, or while
// it ran, and refuses it as it refuses any value the batch holds; the key
// is loaded again, and the value stands in again if that compute fails
// too. A degraded value knows only of this process's own invalidations
// (see invalidationAt), which fenceState already applies.
func (c *Cache[V]) answerState(ctx context.Context, a batchAnswer[V]) marks.State {
	st := c.fenceState(ctx, a.loaded(), a.err)
	if st == marks.Valid && a.standIn && a.err == nil && !a.kept && c.marks.SoftAbove(a.stamp, a.floor) {
		return marks.Soft
	}
	return st
}

// batchResult answers b's caller: its values, and its keys without one.
// The answers pass the fence here unless many judged them all after the
// last came (b.fenced): when the caller's ctx ended first, they are judged
// by what this process knows (a marks read is not waited for), and a key
// whose value does not pass gets ctx's error.
func (c *Cache[V]) batchResult(ctx context.Context, b *batch[V]) (map[string]V, error) {
	b.mu.Lock()
	b.closed = true // from here on only this goroutine touches b
	fenced := b.fenced
	b.mu.Unlock()
	if !fenced {
		// No marks read is waited for: the caller is owed its answer now.
		for _, k := range c.fenceBatch(ctx, b, true) {
			delete(b.got, k)
			err := context.Cause(ctx)
			if err == nil {
				err = fmt.Errorf("%w: %q", ErrInvalidated, k)
			}
			b.errs[k] = err
		}
	}
	out := make(map[string]V, len(b.got))
	for k, a := range b.got {
		if a.l1 {
			c.stats.l1Hit()
			out[k] = a.value
			continue
		}
		c.stats.outcome(a.outcome)
		if c.opts.Observer != nil {
			c.observe(ctx, Event{Kind: EventOutcome, Key: k, Outcome: a.outcome, Negative: a.negative})
		}
		err := a.err
		if a.negative && err == nil {
			c.stats.negativeHits.Add(1)
			err = errCachedNotFound
		}
		if err != nil {
			b.errs[k] = err
			continue
		}
		out[k] = a.value
	}
	if len(b.errs) > 0 {
		return out, b.errs
	}
	return out, nil
}

// many runs the per-key steps for todo (valid keys, perhaps repeated) with
// shared round trips. Its Redis steps and computes are detached from ctx's
// cancellation (a claim taken must end in a fill or an abandon); ctx bounds
// the waits, and no claim is taken once ctx has ended. Once every key has
// an answer, the answers pass the invalidation fence (fenceBatch): the
// keys it refuses then, and those it refused when their answer came (see
// deliver), go through the steps again, up to maxRecomputes times, then
// get [ErrInvalidated].
func (c *Cache[V]) many(ctx context.Context, todo []string, version uint64, fn batchFunc[V], b *batch[V]) {
	for attempt := 0; ; attempt++ {
		c.manyAttempt(ctx, todo, version, fn, b)
		if ctx.Err() != nil {
			return // batchResult judges the answers in hand
		}
		refused := c.fenceBatch(ctx, b, false)
		b.drop(refused)
		todo = append(b.takeRefused(), refused...)
		if ctx.Err() != nil {
			return // the fence's reads may have been cut short: batchResult judges again
		}
		if len(todo) == 0 {
			b.markFenced()
			return
		}
		if attempt == maxRecomputes {
			for _, k := range todo {
				b.fail(k, fmt.Errorf("%w: %q", ErrInvalidated, k))
			}
			b.markFenced()
			return
		}
		c.stats.recomputed.Add(uint64(len(todo)))
	}
}

// deliver hands key's load answer l to the batch if it passes the
// invalidation fence (servable) as it comes (it is judged again when the
// batch answers: fenceBatch); otherwise it notes key as refused. floor is
// the marks' Floor read before l's value was chosen.
func (c *Cache[V]) deliver(ctx context.Context, b *batch[V], key string, l loaded[V], err error, version, floor uint64) {
	if !c.servable(ctx, l, err) {
		b.refuse(key)
		return
	}
	if l.cacheable(err) {
		c.l1put(key, l.entry(), version)
	}
	b.record(key, l, err, floor)
}

// manyAttempt is one pass of many's steps over todo.
func (c *Cache[V]) manyAttempt(ctx context.Context, todo []string, version uint64, fn batchFunc[V], b *batch[V]) {
	dctx := context.WithoutCancel(ctx)
	ks := c.keysForMany(todo)
	prevs := make([]*entry[V], len(ks))
	// The invalidations this process has seen before it reads (floor) and
	// before it loads (loadFloor): a value standing in for a compute is
	// refused at the batch's answer by a soft invalidation seen after it
	// was chosen (answerState). The load's is read after the entries were
	// judged, whose marks were read then: a soft invalidation that
	// expired a value before this attempt does not refuse it as a stand-in.
	floor := c.marks.Floor()

	if !c.store.available() {
		c.degradedMany(dctx, ctx, ks, prevs, distinct(ks), fn, b, floor)
		return
	}
	var missing []int
	var seen map[string]bool // the keys in missing, once one is
	now := c.now()
	err := c.store.readMany(dctx, ks, readShared, func(i int, e entry[V], found bool) {
		key := ks[i].Key
		switch v, _ := c.judge(dctx, &e, found, now); v {
		case verdictHit:
			c.l1put(key, e, version)
			b.record(key, e.loaded(Hit), nil, floor)
		case verdictEarly:
			c.l1put(key, e, version)
			c.refreshAsync(key, e, fn)
			b.record(key, e.loaded(Hit), nil, floor)
		case verdictStale:
			c.refreshAsync(key, e, fn)
			b.record(key, e.loaded(Stale), nil, floor)
		case verdictFailSafe:
			b.record(key, e.loaded(Stale), nil, floor)
		case verdictExpired:
			expired := e
			prevs[i] = &expired
			missing = appendOnce(missing, &seen, ks, i)
		default:
			missing = appendOnce(missing, &seen, ks, i)
		}
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case redisstep.UnderLoad(err):
		// Redis is slow, not down: keep the fleet's protocol, as a
		// single key's fetch does (fetchFailed), and claim every key.
		// Computed without the store, a value would answer through the
		// invalidations of other replicas (a kept value knows only this
		// process's own), while Redis could have told of them.
		missing = distinct(ks)
	case err != nil:
		c.degradedMany(dctx, ctx, ks, prevs, distinct(ks), fn, b, floor)
		return
	}
	if len(missing) == 0 || ctx.Err() != nil {
		return
	}
	loadFloor := c.marks.Floor()
	mk := make([]keys, len(missing))
	for j, i := range missing {
		mk[j] = ks[i]
	}
	var tasks []*task[V]
	var failed []int
	var wg sync.WaitGroup
	for j, cl := range c.store.claimMany(dctx, mk) {
		i := missing[j]
		switch {
		case cl.won:
			tasks = append(tasks, &task[V]{k: ks[i], claim: cl.claim, prev: prevs[i]})
		case cl.err == nil: // another owner computes it: wait, as GetOrCompute would
			k, prev, lost := ks[i], prevs[i], cl
			wg.Go(func() {
				// Shared with the process's other callers of the key; the
				// fence judges its answer when the batch answers.
				l, err := c.share(ctx, k.Key, version, false, func(sctx context.Context) (loaded[V], error) {
					return c.wait(sctx, k, fn, nil, prev, lost)
				})
				b.record(k.Key, l, err, loadFloor)
			})
		default:
			failed = append(failed, i)
		}
	}
	if len(failed) > 0 {
		c.degradedMany(dctx, ctx, ks, prevs, failed, fn, b, loadFloor)
	}
	if len(tasks) > 0 {
		c.lead(dctx, tasks, fn)
		for _, t := range tasks {
			c.deliver(ctx, b, t.k.Key, t.res, t.err, version, loadFloor)
		}
	}
	wg.Wait()
}

// distinct returns the index of each key of ks once.
func distinct(ks []keys) []int {
	var idx []int
	var seen map[string]bool
	for i := range ks {
		idx = appendOnce(idx, &seen, ks, i)
	}
	return idx
}

// appendOnce appends i to missing unless key ks[i] is in it already.
func appendOnce(missing []int, seen *map[string]bool, ks []keys, i int) []int {
	if *seen == nil {
		*seen = make(map[string]bool)
	}
	if (*seen)[ks[i].Key] {
		return missing
	}
	(*seen)[ks[i].Key] = true
	return append(missing, i)
}

// degradedMany computes the keys ks[idx] with one fn call without the store
// (Redis is unreachable), bounded by MaxDegradedComputes; floor is the
// marks' Floor read before (see batchAnswer.floor).
func (c *Cache[V]) degradedMany(dctx, ctx context.Context, ks []keys, prevs []*entry[V], idx []int, fn batchFunc[V], b *batch[V], floor uint64) {
	now := c.now()
	var names []string
	var todo []int
	for _, i := range idx {
		key := ks[i].Key
		if e, fresh, ok := c.keptEntry(key, now); ok {
			if fresh {
				b.record(key, e.loaded(Degraded), nil, floor)
				continue
			}
			if prevs[i] == nil {
				prevs[i] = &e
			}
		}
		names, todo = append(names, key), append(todo, i)
	}
	if len(todo) == 0 {
		return
	}
	r, floor, err := c.computeDegraded(dctx, names, fn)
	now = c.now()
	for _, i := range todo {
		key := ks[i].Key
		if err != nil {
			b.fail(key, err)
			continue
		}
		l, lerr := c.degradedFor(ctx, key, r, prevs[i], floor)
		c.keep(key, l, lerr, prevs[i], now, floor)
		c.deliver(ctx, b, key, l, lerr, 0, floor) // never cacheable: no L1 version needed
	}
}
