package robustness

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// The checker is tested on small hand-written histories: each property must
// report the history that breaks it and stay silent on its legal twin, so
// that a silent suite means the library held, not that the checker slept.

func at(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

type hb struct {
	h  *History
	id int64
}

func newHB() *hb { return &hb{h: &History{End: at(10_000)}} }

func (b *hb) op(replica, op, key string, inv, ret int, resp wire.Response, mod ...func(*wire.Request)) *Op {
	b.id++
	req := wire.Request{ID: b.id, Op: op, Key: key, Deadline: time.Second}
	for _, m := range mod {
		m(&req)
	}
	o := &Op{Replica: replica, Req: req, Invoke: at(inv), Return: at(ret), Resp: resp}
	b.h.Ops = append(b.h.Ops, o)
	return o
}

func (b *hb) compute(id, key, replica string, began, ended int, how string) {
	b.h.Computes = append(b.h.Computes, &Compute{ID: id, Key: key, Replica: replica, Began: at(began), Ended: at(ended), How: how})
}

// computeFor records a compute run for op (a batch's computes name it).
func (b *hb) computeFor(op *Op, id, key, replica string, began, ended int, how string) {
	b.h.Computes = append(b.h.Computes, &Compute{ID: id, Key: key, Replica: replica, Req: op.Req.ID, Began: at(began), Ended: at(ended), How: how})
}

func keys(k ...string) func(*wire.Request) { return func(r *wire.Request) { r.Keys = k } }

// batchVals is a batch's answer: key k answered the compute id.
func batchVals(k, id string) wire.Response {
	return wire.Response{Values: map[string]wire.Value{k: {Key: k, Src: "compute", ID: id}}}
}

func tags(t ...string) func(*wire.Request) { return func(r *wire.Request) { r.Tags = t } }

func val(id string, tags ...string) wire.Response {
	return wire.Response{Value: &wire.Value{Src: "compute", ID: id, Tags: tags}}
}

// partitioned records replica partitioned from Redis from one time to
// another.
func partitioned(b *hb, replica string, from, to int) {
	b.h.Events = append(b.h.Events, Event{At: at(from), What: "partition: " + replica + " partitioned from redis"},
		Event{At: at(to), What: "partition: healed", Heal: true})
}

// batchThroughPartition is a batch on r0 that answers k0's value, computed
// before an InvalidateTags of its tag on r1, after that call returned,
// while replica was partitioned from Redis.
func batchThroughPartition(replica string) func(*hb) {
	return func(b *hb) {
		partitioned(b, replica, 150, 400)
		b.compute("c1", "k0", "r1", 1, 3, "ok")
		b.op("r0", wire.OpGetOrComputeMany, "", 5, 300, wire.Response{Values: map[string]wire.Value{"k0": {Key: "k0", Src: "compute", ID: "c1", Tags: []string{"g0"}}}}, keys("k0", "k1"))
		b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
	}
}

// runsAroundPost is two runs of h0| at once on two replicas, with a POST
// of key (a route and a principal) between their calls.
func runsAroundPost(key string) func(*hb) {
	return func(b *hb) {
		b.op("r0", wire.OpHTTPGet, "h0|", 100, 300, routeVal("h0|", "c1"))
		b.op("r1", wire.OpHTTPPost, key, 120, 130, wire.Response{})
		b.op("r1", wire.OpHTTPGet, "h0|", 140, 300, routeVal("h0|", "c2"))
		b.compute("c1", "h0|", "r0", 110, 200, "ok")
		b.compute("c2", "h0|", "r1", 150, 250, "ok")
	}
}

// routeVal is an HTTP request's answer: a run's response made for key.
func routeVal(key, id string) wire.Response {
	return wire.Response{Outcome: "miss", Value: &wire.Value{Key: key, Src: "compute", ID: id}}
}

// checkCase is a history and the property it must break ("" for none).
type checkCase struct {
	name      string
	build     func(b *hb)
	violation string
}

func checkCases(t *testing.T, cases []checkCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			tc.build(b)
			if got := properties(Check(testScenario, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

func properties(vs []Violation) string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Property)
	}
	return strings.Join(out, ",")
}

var testScenario = Scenario{Mode: "redis", Options: wire.Options{WaitTimeout: 5 * time.Second, LeaseTTL: time.Second},
	Traffic: Traffic{MaxSleep: 100 * time.Millisecond}}

func TestCheckerInvalidation(t *testing.T) {
	checkCases(t, []checkCase{
		{"a call after InvalidateTags answered an older value", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			b.op("r2", wire.OpGetOrCompute, "k0", 300, 310, val("c1", "g0"))
		}, "invalidation"},
		{"a compute that ran through the whole invalidation answered", func(b *hb) {
			b.compute("c1", "k0", "r0", 50, 250, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			b.op("r0", wire.OpGetOrCompute, "k0", 40, 260, val("c1", "g0"))
		}, "invalidation"},
		{"a load in its fill answered after the invalidation returned", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "shared"
			b.op("r0", wire.OpFetch, "k0", 15, 250, r)
		}, "invalidation"},
		{"a load's answer stamped within the stamping slack of the invalidation's return", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "miss"
			b.op("r0", wire.OpFetch, "k0", 5, 200, r).Return += stampSlack / 2 // decided before, stamped after
		}, ""},
		{"a load's answer stamped past the slack", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "miss"
			b.op("r0", wire.OpFetch, "k0", 5, 200, r).Return += 2 * stampSlack
		}, "invalidation"},
		{"a read in flight during the invalidation", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "hit"
			b.op("r0", wire.OpFetch, "k0", 150, 250, r)
		}, ""},
		{"a value computed after the invalidation began", func(b *hb) {
			b.compute("c1", "k0", "r0", 150, 160, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			b.op("r2", wire.OpGetOrCompute, "k0", 300, 310, val("c1", "g0"))
		}, ""},
		{"another tag", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g1"))
			b.op("r2", wire.OpGetOrCompute, "k0", 300, 310, val("c1", "g0"))
		}, ""},
		{"Clear covers every tag", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpClear, "", 100, 200, wire.Response{})
			b.op("r2", wire.OpGetOrCompute, "k0", 300, 310, val("c1", "g0"))
		}, "invalidation"},
		{"revalidated after the invalidation", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			b.h.Computes = append(b.h.Computes, &Compute{ID: "c2", Key: "k0", Replica: "r2", Began: at(250), Ended: at(260), How: "unchanged", Revalidated: "c1"})
			b.op("r2", wire.OpGetOrCompute, "k0", 240, 270, val("c1", "g0"))
		}, ""},
		{"ExpireTags: stale for a compute that failed after it", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpExpireTags, "", 100, 200, wire.Response{}, tags("g0"))
			b.compute("c2", "k0", "r2", 300, 305, "failed")
			b.op("r2", wire.OpGetOrCompute, "k0", 300, 310, val("c1", "g0"))
		}, ""},
		{"ExpireTags: served without a failure", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpExpireTags, "", 100, 200, wire.Response{}, tags("g0"))
			b.op("r2", wire.OpGet, "k0", 300, 310, val("c1", "g0"))
		}, "invalidation"},
		{"a batch answered its own compute after an invalidation that returned while it waited for another key", func(b *hb) {
			o := b.op("r0", wire.OpGetOrComputeMany, "", 5, 300, wire.Response{}, keys("k0", "k1"))
			b.computeFor(o, "c1", "k0", "r0", 10, 20, "ok")
			o.Resp = wire.Response{Values: map[string]wire.Value{"k0": {Key: "k0", Src: "compute", ID: "c1", Tags: []string{"g0"}}}}
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
		}, "invalidation"},
		{"a batch that returned before the invalidation did", func(b *hb) {
			o := b.op("r0", wire.OpGetOrComputeMany, "", 5, 150, wire.Response{}, keys("k0", "k1"))
			b.computeFor(o, "c1", "k0", "r0", 10, 20, "ok")
			o.Resp = wire.Response{Values: map[string]wire.Value{"k0": {Key: "k0", Src: "compute", ID: "c1", Tags: []string{"g0"}}}}
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
		}, ""},
		{"a batch answered a value computed after the invalidation began", func(b *hb) {
			o := b.op("r0", wire.OpGetOrComputeMany, "", 5, 300, wire.Response{}, keys("k0", "k1"))
			b.computeFor(o, "c1", "k0", "r0", 150, 160, "ok")
			o.Resp = wire.Response{Values: map[string]wire.Value{"k0": {Key: "k0", Src: "compute", ID: "c1", Tags: []string{"g0"}}}}
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
		}, ""},
		{"a batch answered through an invalidation by a replica that could not read the marks", batchThroughPartition("r0"), ""},
		{"a batch answered through an invalidation while another replica was partitioned", batchThroughPartition("r2"), "invalidation"},
		{"a hit after an invalidation by a replica that could not read the marks", func(b *hb) {
			partitioned(b, "r0", 150, 400)
			b.compute("c1", "k0", "r1", 1, 3, "ok")
			r := val("c1", "g0")
			r.Outcome = "hit"
			b.op("r0", wire.OpGetOrCompute, "k0", 250, 260, r)
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
		}, "invalidation"},
		{"degraded on the replica that computed it", func(b *hb) {
			b.h.Events = append(b.h.Events, Event{At: at(0), What: "partition: r2 partitioned"}, Event{At: at(250), What: "partition: healed", Heal: true})
			b.compute("c1", "k0", "r2", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "degraded"
			b.op("r2", wire.OpFetch, "k0", 300, 310, r)
		}, ""},
	})
}

func TestCheckerWritesErrorsDeadlinesAndComputes(t *testing.T) {
	checkCases(t, []checkCase{
		{"same replica after Delete", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpDelete, "k0", 100, 110, wire.Response{})
			b.op("r0", wire.OpGetOrCompute, "k0", 120, 130, val("c1"))
		}, "write"},
		{"other replica inside the cross-replica window", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpDelete, "k0", 100, 110, wire.Response{})
			b.op("r1", wire.OpGetOrCompute, "k0", 120, 130, val("c1"))
		}, ""},
		{"Expire: another batch's failed compute re-armed the expired value for its keys", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpExpire, "k0", 100, 110, wire.Response{})
			failing := b.op("r0", wire.OpGetOrComputeMany, "", 120, 150, batchVals("k0", "c1"), keys("k1", "k0"))
			b.computeFor(failing, "c2", "k1", "r0", 121, 140, "failed") // k1 fails first: k0 is never computed
			b.op("r0", wire.OpGetOrComputeMany, "", 160, 170, batchVals("k0", "c1"), keys("k0"))
		}, ""},
		{"Expire: a failed batch that did not ask for the key re-arms nothing of it", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpExpire, "k0", 100, 110, wire.Response{})
			failing := b.op("r0", wire.OpGetOrComputeMany, "", 120, 150, wire.Response{}, keys("k1", "k2"))
			b.computeFor(failing, "c2", "k1", "r0", 121, 140, "failed")
			b.op("r0", wire.OpGetOrComputeMany, "", 160, 170, batchVals("k0", "c1"), keys("k0"))
		}, "write"},
		{"Expire: served as a hit on the same replica", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpExpire, "k0", 100, 110, wire.Response{})
			b.op("r0", wire.OpGet, "k0", 120, 130, val("c1"))
		}, "write"},
		{"Expire: served on another replica past the cross-replica window", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpExpire, "k0", 100, 110, wire.Response{})
			b.op("r1", wire.OpGetOrCompute, "k0", 2000, 2010, val("c1"))
		}, "write"},
		{"Expire: stale for a compute that failed after it", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpExpire, "k0", 100, 110, wire.Response{})
			b.compute("c2", "k0", "r0", 120, 125, "failed")
			r := val("c1")
			r.Outcome = "stale"
			b.op("r0", wire.OpFetch, "k0", 120, 130, r)
		}, ""},
		{"Expire: a value computed after it began", func(b *hb) {
			b.compute("c1", "k0", "r0", 105, 108, "ok")
			b.op("r0", wire.OpExpire, "k0", 100, 110, wire.Response{})
			b.op("r0", wire.OpGet, "k0", 120, 130, val("c1"))
		}, ""},
		{"undocumented error", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 110, wire.Response{Err: wire.ErrOther})
		}, "documented errors"},
		{"ErrInvalidated without invalidations", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 110, wire.Response{Err: wire.ErrInvalidated})
		}, "documented errors"},
		{"a deadline error while the caller's context was alive", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 400, wire.Response{Err: wire.ErrDeadline})
		}, "context errors"},
		{"a deadline error once the deadline passed", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 1120, wire.Response{Err: wire.ErrDeadline})
		}, ""},
		{"a batch key's deadline error while the caller's context was alive", func(b *hb) {
			b.op("r0", wire.OpGetOrComputeMany, "", 100, 400, wire.Response{KeyErrs: map[string]string{"k0": wire.ErrDeadline + ": context deadline exceeded"}}, keys("k0"))
		}, "context errors"},
		{"past the deadline", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 3000, val("c1"))
			b.compute("c1", "k0", "r0", 110, 120, "ok")
		}, "deadline"},
		{"two computes of a key at once", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 300, val("c1"))
			b.op("r1", wire.OpGetOrCompute, "k0", 100, 300, val("c2"))
			b.compute("c1", "k0", "r0", 110, 200, "ok")
			b.compute("c2", "k0", "r1", 150, 250, "ok")
		}, "one compute"},
		{"two computes at once around a Set", func(b *hb) {
			b.op("r0", wire.OpGetOrCompute, "k0", 100, 300, val("c1"))
			b.op("r2", wire.OpSet, "k0", 120, 130, wire.Response{})
			b.op("r1", wire.OpGetOrCompute, "k0", 140, 300, val("c2"))
			b.compute("c1", "k0", "r0", 110, 200, "ok")
			b.compute("c2", "k0", "r1", 150, 250, "ok")
		}, ""},
		{"two runs of a URL at once around another principal's POST to it", runsAroundPost("h0|auth=alice"), ""},
		{"two runs of a URL at once around a POST to another URL", runsAroundPost("h1|auth=alice"), "one compute"},
		{"a stored value went back", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.compute("c2", "k0", "r0", 30, 40, "ok")
			r2, r1 := val("c2"), val("c1")
			r2.Outcome, r1.Outcome = "hit", "hit"
			b.op("r1", wire.OpFetch, "k0", 100, 110, r2)
			b.op("r1", wire.OpFetch, "k0", 120, 130, r1)
		}, "monotonic"},
	})
}

func TestCheckerRegisters(t *testing.T) {
	checkCases(t, []checkCase{
		{"a read after a write returned saw the old value", func(b *hb) {
			s := b.op("r0", wire.OpSet, "r0", 100, 110, wire.Response{})
			b.op("r0", wire.OpDelete, "r0", 120, 130, wire.Response{})
			b.op("r1", wire.OpGet, "r0", 140, 150, wire.Response{Value: &wire.Value{Src: "set", ID: "s" + itoa(s.Req.ID)}, Found: true})
		}, "linearizable register"},
		{"a read joined one in flight before the write", func(b *hb) {
			s := b.op("r0", wire.OpSet, "r0", 100, 110, wire.Response{})
			b.op("r1", wire.OpGet, "r0", 115, 160, wire.Response{Value: &wire.Value{Src: "set", ID: "s" + itoa(s.Req.ID)}, Found: true})
			b.op("r0", wire.OpDelete, "r0", 120, 130, wire.Response{})
			b.op("r1", wire.OpGet, "r0", 140, 160, wire.Response{Value: &wire.Value{Src: "set", ID: "s" + itoa(s.Req.ID)}, Found: true})
		}, ""},
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A purge by surrogate key holds the invalidation fence over the route
// responses tagged with its keys, and over them only.
func TestCheckerPurgeBySurrogateKey(t *testing.T) {
	hit := func(id string, tags ...string) wire.Response {
		r := val(id, tags...)
		r.Outcome, r.Value.Key = "hit", "h0"
		return r
	}
	checkCases(t, []checkCase{
		{"a route answered a response tagged before the purge", func(b *hb) {
			b.compute("c1", "h0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{}, tags("route-h0"))
			b.op("r2", wire.OpHTTPGet, "h0", 300, 310, hit("c1", "route-h0", "rg0"))
		}, "invalidation"},
		{"a handler that ran through the purge answered its own request", func(b *hb) {
			b.compute("c1", "h0", "r0", 50, 250, "ok")
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{}, tags("rg0"))
			r := val("c1", "route-h0", "rg0")
			r.Outcome, r.Value.Key = "miss", "h0"
			b.op("r0", wire.OpHTTPGet, "h0", 40, 260, r)
		}, "invalidation"},
		{"a route response computed after the purge began", func(b *hb) {
			b.compute("c1", "h0", "r0", 150, 160, "ok")
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{}, tags("route-h0"))
			b.op("r2", wire.OpHTTPGet, "h0", 300, 310, hit("c1", "route-h0", "rg0"))
		}, ""},
		{"another route's key", func(b *hb) {
			b.compute("c1", "h0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{}, tags("route-h1", "rg1"))
			b.op("r2", wire.OpHTTPGet, "h0", 300, 310, hit("c1", "route-h0", "rg0"))
		}, ""},
		{"a purge that failed", func(b *hb) {
			b.compute("c1", "h0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{Err: wire.ErrUnavailable}, tags("route-h0"))
			b.op("r2", wire.OpHTTPGet, "h0", 300, 310, hit("c1", "route-h0", "rg0"))
		}, ""},
		{"a purge does not reach the cache's own entries", func(b *hb) {
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{}, tags("g0"))
			b.op("r2", wire.OpGetOrCompute, "k0", 300, 310, val("c1", "g0"))
		}, ""},
		{"InvalidateTags does not reach the routes", func(b *hb) {
			b.compute("c1", "h0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("rg0"))
			b.op("r2", wire.OpHTTPGet, "h0", 300, 310, hit("c1", "route-h0", "rg0"))
		}, ""},
		{"a request whose every run was purged is answered ErrInvalidated", func(b *hb) {
			for i, at := range []int{100, 300, 500} {
				b.op("r1", wire.OpHTTPPurge, "", at, at+100, wire.Response{}, tags("rg0"))
				b.compute("c"+itoa(int64(i+1)), "h0", "r0", at-50, at+150, "ok")
			}
			b.op("r0", wire.OpHTTPGet, "h0", 40, 700, wire.Response{Err: wire.ErrInvalidated})
		}, ""},
		{"a route's ErrInvalidated with one purge", func(b *hb) {
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{}, tags("rg0"))
			b.op("r0", wire.OpHTTPGet, "h0", 40, 700, wire.Response{Err: wire.ErrInvalidated})
		}, "documented errors"},
		{"a purge's undocumented error", func(b *hb) {
			b.op("r1", wire.OpHTTPPurge, "", 100, 200, wire.Response{Err: wire.ErrOrigin}, tags("rg0"))
		}, "documented errors"},
	})
}

// TestCheckerSoftTimeoutStandIn: after ExpireTags, the expired value may
// answer a caller whose load ran past SoftTimeout, counted from the call
// that started the load (its claim comes before its compute), while the
// load's compute or its fill went on; not a caller whose load had ended.
func TestCheckerSoftTimeoutStandIn(t *testing.T) {
	sc := testScenario
	sc.Options.SoftTimeout = 150 * time.Millisecond
	for _, tc := range []struct {
		name      string
		ended     int // the load's compute ended (ms)
		answered  int // the stand-in answered (ms)
		violation string
	}{
		{"answered at SoftTimeout from the call, the compute just ended, its fill going on", 448, 450, ""},
		{"answered while the compute still ran", 600, 450, ""},
		{"answered a fill budget after the load's compute ended", 320, 600, "invalidation"},
		{"answered before SoftTimeout", 600, 390, "invalidation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r1", wire.OpExpireTags, "", 100, 200, wire.Response{}, tags("g0"))
			call := b.op("r1", wire.OpGetOrComputeMany, "", 300, tc.answered, batchVals("k0", "c1"), keys("k0", "k1"))
			b.computeFor(call, "c2", "k0", "r1", 302, tc.ended, "ok") // began a claim's round trip after the call
			for i := range b.h.Ops[len(b.h.Ops)-1].Resp.Values {
				v := b.h.Ops[len(b.h.Ops)-1].Resp.Values[i]
				v.Tags = []string{"g0"}
				b.h.Ops[len(b.h.Ops)-1].Resp.Values[i] = v
			}
			if got := properties(Check(sc, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// TestCheckerDegradedValueStandsInOnlyWhileKept: a value answered as
// Degraded lives in its replica's memory, out of reach of other replicas'
// invalidations, for DegradedTTL and a stored value's windows; an answer
// of it after that is judged like any other.
func TestCheckerDegradedValueStandsInOnlyWhileKept(t *testing.T) {
	for _, tc := range []struct {
		name      string
		at        int
		violation string
	}{
		{"while kept", 300, ""},
		{"long after", 70_000, "invalidation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			b.h.End = at(80_000)
			b.h.Events = append(b.h.Events, Event{At: at(0), What: "partition: r0 partitioned"}, Event{At: at(30), What: "partition: healed", Heal: true})
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			d := val("c1", "g0")
			d.Outcome = "degraded"
			b.op("r0", wire.OpFetch, "k0", 5, 25, d)
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "stale"
			b.op("r0", wire.OpFetch, "k0", tc.at, tc.at+10, r)
			if got := properties(Check(testScenario, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// A value computed wholly while its replica was cut off from Redis is a
// degraded one there, though GetOrCompute, which answered it first, does
// not say so: it may stand in for a failing compute on that replica after
// another replica's invalidation, as a value answered Degraded may. The
// same history without the partition is a violation.
func TestCheckerValueComputedCutOffIsDegraded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cutOff    bool
		violation string
	}{
		{"computed while partitioned", true, ""},
		{"computed with Redis reachable", false, "invalidation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			if tc.cutOff {
				b.h.Events = append(b.h.Events, Event{At: at(5), What: "partition: r0 partitioned from redis"},
					Event{At: at(400), What: "partition: healed", Heal: true})
			}
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpGetOrCompute, "k0", 8, 25, val("c1", "g0"))
			b.op("r1", wire.OpInvalidateTags, "", 100, 200, wire.Response{}, tags("g0"))
			r := val("c1", "g0")
			r.Outcome = "stale"
			b.op("r0", wire.OpFetch, "k0", 300, 310, r)
			if got := properties(Check(testScenario, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// A route response answers only requests of the principal it was made for
// (wire.HTTPKey), on every path.
func TestCheckerSelected(t *testing.T) {
	answer := func(outcome, madeFor string) wire.Response {
		return wire.Response{Outcome: outcome, Value: &wire.Value{Key: madeFor, Src: "compute", ID: "c1"}}
	}
	checkCases(t, []checkCase{
		{"a credential's response answered another credential", func(b *hb) {
			b.compute("c1", "h0|auth=alice", "r0", 10, 20, "ok")
			b.op("r1", wire.OpHTTPGet, "h0|auth=bob", 30, 40, answer("hit", "h0|auth=alice"))
		}, "selected"},
		{"a session's page answered an anonymous request that joined its run", func(b *hb) {
			b.compute("c1", "h0|session=alice", "r0", 10, 20, "ok")
			b.op("r0", wire.OpHTTPGet, "h0|", 5, 25, answer("shared", "h0|session=alice"))
		}, "selected"},
		{"a poisoned entry: a forwarded host's page answered a plain request", func(b *hb) {
			b.compute("c1", "h0|host=evil.example", "r0", 10, 20, "ok")
			b.op("r2", wire.OpHTTPGet, "h0|", 30, 40, answer("waited", "h0|host=evil.example"))
		}, "selected"},
		{"an ignored cookie seen by a cached run", func(b *hb) {
			b.compute("c1", "h0|ga-seen=GA1.7", "r0", 10, 20, "ok")
			b.op("r0", wire.OpHTTPGet, "h0|", 5, 25, answer("miss", "h0|ga-seen=GA1.7"))
		}, "selected"},
		{"each principal its own response", func(b *hb) {
			b.compute("c1", "h0|auth=alice;lang=en", "r0", 10, 20, "ok")
			b.op("r1", wire.OpHTTPGet, "h0|auth=alice;lang=en", 30, 40, answer("hit", "h0|auth=alice;lang=en"))
		}, ""},
	})
}

// With L1, another replica's write reaches a replica's L1 with its
// announcement: the replaced value answers there only within the
// cross-replica window, unless a fault may have lost the announcement
// (then until L1TTL ends).
func TestCheckerL1AfterAnotherReplicasWrite(t *testing.T) {
	sc := testScenario
	sc.Options.L1Size, sc.Options.L1TTL = 100, 8*time.Second
	for _, tc := range []struct {
		name      string
		fault     bool
		violation string
	}{
		{"no fault: the announcement arrives", false, "write"},
		{"the subscription killed meanwhile", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			b.op("r0", wire.OpSet, "k0", 100, 110, wire.Response{})
			if tc.fault {
				b.h.Events = append(b.h.Events, Event{At: at(105), What: "pubsub-kill: pub/sub connections killed"},
					Event{At: at(150), What: "pubsub-kill: healed", Heal: true})
			}
			r := val("c1")
			r.Outcome = "hit"
			b.op("r1", wire.OpFetch, "k0", 2000, 2010, r)
			if got := properties(Check(sc, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// A value answers as fresh within its TTL, and on any path within TTL +
// max(Stale, StaleIfError), judged from the first moment its entry
// certainly existed (a call read it from the store, or its Set returned).
func TestCheckerFreshness(t *testing.T) {
	sc := testScenario
	sc.Options.TTL, sc.Options.Stale, sc.Options.StaleIfError = 400*time.Millisecond, 200*time.Millisecond, time.Second
	answer := func(b *hb, outcome string, inv int) {
		r := val("c1")
		r.Outcome = outcome
		b.op("r1", wire.OpFetch, "k0", inv, inv+5, r)
	}
	for _, tc := range []struct {
		name      string
		build     func(b *hb)
		violation string
	}{
		{"a hit within the TTL of the first read", func(b *hb) {
			answer(b, "hit", 100)
			answer(b, "hit", 500)
		}, ""},
		{"a hit past the TTL", func(b *hb) {
			answer(b, "hit", 100)
			answer(b, "hit", 600)
		}, "freshness"},
		{"stale within TTL + StaleIfError", func(b *hb) {
			answer(b, "hit", 100)
			answer(b, "stale", 1400)
		}, ""},
		{"stale past TTL + StaleIfError", func(b *hb) {
			answer(b, "hit", 100)
			answer(b, "stale", 1600)
		}, "freshness"},
		{"a value re-armed by an unchanged compute is not judged", func(b *hb) {
			answer(b, "hit", 100)
			b.h.Computes = append(b.h.Computes, &Compute{ID: "c2", Key: "k0", Replica: "r0", Began: at(900), Ended: at(910), How: "unchanged", Revalidated: "c1"})
			answer(b, "hit", 1200)
		}, ""},
		{"a compute's own TTL", func(b *hb) {
			o := b.op("r0", wire.OpFetch, "k0", 0, 30, val("c1"), func(r *wire.Request) { r.Compute.TTL = 2 * time.Second })
			b.h.Computes[0].Req = o.Req.ID
			answer(b, "hit", 100)
			answer(b, "hit", 1500)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			b.compute("c1", "k0", "r0", 10, 20, "ok")
			tc.build(b)
			if got := properties(Check(sc, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// A call answers Degraded only while a fault (or its settling) may keep
// its replica from Redis.
func TestCheckerNoDegradedWhileReachable(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fault     bool
		at        int
		violation string
	}{
		{"during a partition of its replica", true, 300, ""},
		{"long after the partition healed", true, 9_000, "no degraded while reachable"},
		{"with no fault", false, 300, "no degraded while reachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			if tc.fault {
				b.h.Events = append(b.h.Events, Event{At: at(100), What: "partition: r0 partitioned"}, Event{At: at(400), What: "partition: healed", Heal: true})
			}
			b.compute("c1", "k0", "r0", tc.at, tc.at+5, "ok")
			d := val("c1")
			d.Outcome = "degraded"
			b.op("r0", wire.OpFetch, "k0", tc.at, tc.at+10, d)
			if got := properties(Check(testScenario, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// No call answers Degraded under an overload (Redis slow past the budget,
// never down), but for one that began within the overload's first round
// trip: no reply at the new round trip can have come within its budget.
// A stall (a pausing round: the replica's process stopped) excuses none
// either: a starved process is not cut off from Redis.
func TestCheckerNoDegradedUnderOverloadOrStall(t *testing.T) {
	overload := []Event{{At: at(1_000), What: "overload: every replica's round trip at 1.4 × RedisTimeout (175ms each way)"}, {At: at(3_000), What: "overload: healed", Heal: true}}
	stall := []Event{{At: at(1_000), What: "stall: r0 silent on its subscriptions, then its process stopped at its fence's marks read for 700ms (a pausing round)"}, {At: at(2_000), What: "stall: healed", Heal: true}}
	for _, tc := range []struct {
		name      string
		events    []Event
		at        int
		violation string
	}{
		{"at the overload's injection", overload, 1_000, ""},
		{"within its first round trip", overload, 1_300, ""},
		{"past its first round trip", overload, 1_400, "no degraded under overload"},
		{"during a stall of its replica", stall, 1_200, "no degraded while reachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			b.h.Events = append(b.h.Events, tc.events...)
			b.compute("c1", "k0", "r0", tc.at+250, tc.at+255, "ok")
			d := val("c1")
			d.Outcome = "degraded"
			b.op("r0", wire.OpFetch, "k0", tc.at, tc.at+260, d)
			if got := properties(Check(testScenario, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

func TestCheckerRefusedOutageCost(t *testing.T) {
	for _, tc := range []struct {
		name       string
		op         string
		inv, ret   int
		kind       string
		paused     bool
		violations string
	}{
		{"a Get that waited out a budget", wire.OpGet, 500, 760, "redis-kill", false, "refused outage costs no budget"},
		{"a Set that waited out a budget", wire.OpSet, 500, 760, "redis-kill", false, "refused outage costs no budget"},
		{"a Get answered at once", wire.OpGet, 500, 530, "redis-kill", false, ""},
		{"a Get begun within the grace", wire.OpGet, 200, 460, "redis-kill", false, ""},
		{"a Get that waited out a budget past the heal", wire.OpGet, 700, 960, "redis-kill", false, "refused outage costs no budget"},
		{"a Get that waited out a budget into the heal", wire.OpGet, 800, 1_060, "redis-kill", false, "refused outage costs no budget"},
		{"a Get invoked too close to the heal", wire.OpGet, 900, 1_160, "redis-kill", false, ""},
		{"a Fetch (its compute counts)", wire.OpFetch, 500, 760, "redis-kill", false, ""},
		{"a Get on a paused replica", wire.OpGet, 500, 760, "redis-kill", true, ""},
		{"a Get while Redis is paused (silent, not refusing)", wire.OpGet, 500, 760, "redis-pause", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHB()
			b.h.Events = append(b.h.Events, Event{At: at(0), What: tc.kind + ": redis down"}, Event{At: at(1_000), What: tc.kind + ": healed", Heal: true})
			resp := wire.Response{Err: wire.ErrUnavailable}
			if tc.op == wire.OpFetch {
				b.compute("c1", "k0", "r0", tc.inv+5, tc.ret-5, "ok")
				resp = val("c1")
				resp.Outcome = "degraded"
			}
			o := b.op("r0", tc.op, "k0", tc.inv, tc.ret, resp)
			o.Paused = tc.paused
			if got := properties(Check(testScenario, b.h)); got != tc.violations {
				t.Errorf("violations %q, want %q", got, tc.violations)
			}
		})
	}
}

// A call that finds a value of its key stored and fresh answers it: a
// compute that begins while one is (seen in the store before the call,
// within its TTL of its write) is a violation, unless a write of the key,
// an invalidation of its tags or a fault on the caller's replica may have
// undone it since.
func TestCheckerServedNotRecomputed(t *testing.T) {
	sc := testScenario
	sc.Options.TTL = time.Second
	// stored: c1 computed on r0 for its call (0–25), then read as a hit on
	// r0 (r1 too, but in process-local mode).
	stored := func(b *hb, tags ...string) {
		o := b.op("r0", wire.OpGetOrCompute, "k0", 0, 25, val("c1", tags...))
		b.computeFor(o, "c1", "k0", "r0", 5, 20, "ok")
		hit := val("c1", tags...)
		hit.Outcome = "hit"
		b.op("r0", wire.OpFetch, "k0", 100, 105, hit)
	}
	recompute := func(b *hb, replica string, inv int) {
		o := b.op(replica, wire.OpGetOrCompute, "k0", inv, inv+20, val("c2"))
		b.computeFor(o, "c2", "k0", replica, inv+5, inv+15, "ok")
	}
	for _, tc := range []struct {
		name      string
		sc        func(*Scenario)
		build     func(b *hb)
		violation string
	}{
		{"computed again while a fresh value was stored", nil, func(b *hb) {
			stored(b)
			recompute(b, "r2", 300)
		}, "fresh value served"},
		{"computed again past its TTL", nil, func(b *hb) {
			stored(b)
			recompute(b, "r2", 1100)
		}, ""},
		{"a call that began before the value was seen in the store", nil, func(b *hb) {
			stored(b)
			recompute(b, "r2", 90)
		}, ""},
		{"after a Delete of the key", nil, func(b *hb) {
			stored(b)
			b.op("r1", wire.OpDelete, "k0", 200, 210, wire.Response{})
			recompute(b, "r2", 300)
		}, ""},
		{"after an invalidation of its tag", nil, func(b *hb) {
			stored(b, "g0")
			b.op("r1", wire.OpInvalidateTags, "", 200, 300, wire.Response{}, tags("g0"))
			recompute(b, "r2", 400)
		}, ""},
		{"an invalidation of another tag, or a purge of the HTTP route, excuses nothing", nil, func(b *hb) {
			stored(b, "g0")
			b.op("r1", wire.OpInvalidateTags, "", 200, 300, wire.Response{}, tags("g1"))
			b.op("r1", wire.OpHTTPPurge, "", 200, 300, wire.Response{}, tags("rg0"))
			recompute(b, "r2", 400)
		}, "fresh value served"},
		// c3's call began before c1 was seen in the store: it is not judged.
		{"replaced by a value of a shorter TTL of its own, expired since", nil, func(b *hb) {
			stored(b)
			o := b.op("r1", wire.OpGetOrCompute, "k0", 90, 180, val("c3"), func(r *wire.Request) { r.Compute.TTL = 50 * time.Millisecond })
			b.computeFor(o, "c3", "k0", "r1", 155, 170, "ok")
			recompute(b, "r2", 300)
		}, ""},
		{"replaced by a cached not-found", nil, func(b *hb) {
			stored(b)
			o := b.op("r1", wire.OpGetOrCompute, "k0", 90, 180, wire.Response{Err: "not-found"})
			b.computeFor(o, "c3", "k0", "r1", 155, 170, "not-found")
			recompute(b, "r2", 300)
		}, ""},
		{"a partition of the caller's replica", nil, func(b *hb) {
			stored(b)
			b.h.Events = append(b.h.Events, Event{At: at(250), What: "partition: r2 partitioned"}, Event{At: at(280), What: "partition: healed", Heal: true})
			recompute(b, "r2", 300)
		}, ""},
		{"a Set's value, stored when the Set returned", nil, func(b *hb) {
			b.op("r0", wire.OpSet, "k0", 50, 60, wire.Response{})
			recompute(b, "r2", 300)
		}, "fresh value served"},
		{"XFetch refreshes fresh values early by design", func(sc *Scenario) { sc.Options.Beta = 1 }, func(b *hb) {
			stored(b)
			recompute(b, "r2", 300)
		}, ""},
		{"process-local: another replica's store", func(sc *Scenario) { sc.Mode = "local" }, func(b *hb) {
			stored(b)
			recompute(b, "r1", 300)
		}, ""},
		{"process-local: the replica's own store", func(sc *Scenario) { sc.Mode = "local" }, func(b *hb) {
			stored(b)
			recompute(b, "r0", 300)
		}, "fresh value served"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sc
			if tc.sc != nil {
				tc.sc(&sc)
			}
			b := newHB()
			tc.build(b)
			if got := properties(Check(sc, b.h)); got != tc.violation {
				t.Errorf("violations %q, want %q", got, tc.violation)
			}
		})
	}
}

// A replica process that exits by itself (a panic kills it) is a
// violation, whatever the rest of the history says.
func TestCheckerNoCrash(t *testing.T) {
	b := newHB()
	b.h.Crashes = []string{"r1 exited by itself (exit status 2); its standard error ends:\npanic: boom"}
	if got := properties(Check(testScenario, b.h)); got != "no crash" {
		t.Errorf("violations %q, want no crash", got)
	}
}
