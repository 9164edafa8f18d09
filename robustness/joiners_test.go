package robustness

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// The joiners' route is where a run's response that is not stored meets
// requests of other principals: its every request is untagged (a tagged
// response that is not stored answers only its own request) and stale on
// arrival (never stored, so its URL never gets a marker that would send
// each principal to a variant key of its own), its runs last long enough
// to be joined, and its principals differ only in what the response
// varies on.
func TestTrafficJoinersShareOneUnstoredURL(t *testing.T) {
	tr := Profile("short")[0].Traffic
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	n := 0
	for id := range int64(20_000) {
		req, _ := tr.next(rng, id)
		route, principal := wire.HTTPKey(req.Key)
		if route != joinKey {
			continue
		}
		n++
		seen[principal] = true
		switch {
		case req.Op != wire.OpHTTPGet:
			t.Fatalf("%s: op %s, want %s", req.Key, req.Op, wire.OpHTTPGet)
		case len(req.Tags) > 0:
			t.Fatalf("%s: tagged %q: its unstored response would answer only its own request", req.Key, req.Tags)
		case req.Compute.TTL <= 0:
			t.Fatalf("%s: no TTL: the route would store its response", req.Key)
		case req.Compute.Sleep < tr.MaxSleep/4:
			t.Fatalf("%s: a run of %s, too short to be joined", req.Key, req.Compute.Sleep)
		}
	}
	if share := float64(n) / 20_000; share < 0.04 {
		t.Errorf("%.1f%% of operations on the joiners' route, want at least 4%%", 100*share)
	}
	if len(seen) != len(joinPrincipals) {
		t.Errorf("principals %v, want each of %q", seen, joinPrincipals)
	}
}

// Coverage counts the joiners a run's response did not select: they ran
// the handler for themselves (a bypass), as a session's request does
// before it joins anything, which is not counted.
func TestCheckerCountsUnselectedJoiners(t *testing.T) {
	b := newHB()
	b.compute("c1", "hj|auth=alice", "r0", 10, 200, "ok")
	b.compute("c2", "hj|lang=fr", "r0", 60, 250, "ok")
	own := func(outcome, key, id string) wire.Response {
		return wire.Response{Outcome: outcome, Value: &wire.Value{Key: key, Src: "compute", ID: id, Unstored: true}}
	}
	b.op("r0", wire.OpHTTPGet, "hj|auth=alice", 5, 205, own("miss", "hj|auth=alice", "c1"))
	b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 50, 255, own("bypass", "hj|lang=fr", "c2"))
	b.op("r0", wire.OpHTTPGet, "hj|session=alice", 50, 255, own("bypass", "hj|session=alice", "c3"))
	vs, cov := CheckCoverage(testScenario, b.h)
	if len(vs) > 0 || cov.Unselected != 1 {
		t.Errorf("violations %v, unselected joiners %d; want none and 1", vs, cov.Unselected)
	}
	// The planted leak: the joiner answered the run's response.
	b.h.Ops[1].Resp = own("shared", "hj|auth=alice", "c1")
	if got := properties(Check(testScenario, b.h)); got != "selected" {
		t.Errorf("violations %q, want selected", got)
	}
}

// The requests of one variant that joined a run it did not select share a
// run of their own, on their variant's key: beside it, a request of the
// variant that arrived after the joined run answered runs on the URL's key
// (excused); two runs of the variant's joiners at once are a violation of
// one compute, also when they passed by the cache.
func TestCheckerJudgesRegroupedJoiners(t *testing.T) {
	own := func(outcome, key, id string) wire.Response {
		return wire.Response{Outcome: outcome, Value: &wire.Value{Key: key, Src: "compute", ID: id, Unstored: true}}
	}
	build := func(second string) *History {
		b := newHB()
		alice := b.op("r0", wire.OpHTTPGet, "hj|auth=alice", 5, 205, own("miss", "hj|auth=alice", "c1"))
		b.computeFor(alice, "c1", "hj|auth=alice", "r0", 10, 200, "failed")
		joiner := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 50, 300, own("miss", "hj|lang=fr", "c2"))
		b.computeFor(joiner, "c2", "hj|lang=fr", "r0", 210, 290, "ok")
		switch second {
		case "fresh": // invoked after alice's run answered: the URL's key
			o := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 206, 320, own("miss", "hj|lang=fr", "c3"))
			b.computeFor(o, "c3", "hj|lang=fr", "r0", 215, 310, "ok")
		case "joiner", "bypass": // another joiner of alice's run
			o := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 60, 320, own("miss", "hj|lang=fr", "c3"))
			if second == "bypass" {
				o.Resp.Outcome = "bypass"
			}
			b.computeFor(o, "c3", "hj|lang=fr", "r0", 215, 310, "ok")
		}
		return b.h
	}
	if vs, cov := CheckCoverage(testScenario, build("fresh")); len(vs) > 0 || cov.Unselected != 1 {
		t.Errorf("a fresh request beside the joiners' run: violations %v, unselected joiners %d; want none and 1", vs, cov.Unselected)
	}
	for _, second := range []string{"joiner", "bypass"} {
		if got := properties(Check(testScenario, build(second))); got != "one compute" {
			t.Errorf("two runs of one variant's joiners (%s): violations %q, want one compute", second, got)
		}
	}
}

// What a request may have joined: a regrouped run is on its variant's key,
// where no request of another principal joins it; and a request whose run
// panicked is sent again by the client's transport when the connection
// drops, so it arrives anew then.
func TestCheckerRegroupedRunsJoinOnlyURLRuns(t *testing.T) {
	own := func(key, id string) wire.Response {
		return wire.Response{Outcome: "miss", Value: &wire.Value{Key: key, Src: "compute", ID: id, Unstored: true}}
	}
	t.Run("beside a regrouped run", func(t *testing.T) {
		b := newHB()
		bob := b.op("r0", wire.OpHTTPGet, "hj|auth=bob", 5, 205, own("hj|auth=bob", "c1"))
		b.computeFor(bob, "c1", "hj|auth=bob", "r0", 10, 200, "ok")
		a1 := b.op("r0", wire.OpHTTPGet, "hj|auth=alice", 50, 405, own("hj|auth=alice", "c2"))
		b.computeFor(a1, "c2", "hj|auth=alice", "r0", 205, 400, "ok") // regrouped after bob's run
		fr := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 60, 305, own("hj|lang=fr", "c3"))
		b.computeFor(fr, "c3", "hj|lang=fr", "r0", 205, 300, "ok") // regrouped after bob's run
		other := b.op("r1", wire.OpHTTPGet, "hj|auth=bob", 235, 315, own("hj|auth=bob", "c5"))
		b.computeFor(other, "c5", "hj|auth=bob", "r1", 240, 310, "ok")
		// Invoked while fr's regrouped run went on, it waited for the URL's
		// lease (r1's run), then ran on the URL's key beside c2.
		a2 := b.op("r0", wire.OpHTTPGet, "hj|auth=alice", 250, 425, own("hj|auth=alice", "c4"))
		b.computeFor(a2, "c4", "hj|auth=alice", "r0", 312, 420, "ok")
		if vs := Check(testScenario, b.h); len(vs) > 0 {
			t.Errorf("violations %v, want none", vs)
		}
	})
	t.Run("sent again after a panic", func(t *testing.T) {
		b := newHB()
		alice := b.op("r0", wire.OpHTTPGet, "hj|auth=alice", 5, 205, own("hj|auth=alice", "c1"))
		b.computeFor(alice, "c1", "hj|auth=alice", "r0", 10, 200, "ok")
		r := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 50, 395, wire.Response{Err: "panic"})
		b.computeFor(r, "c2", "hj|lang=fr", "r0", 205, 300, "panic") // regrouped after alice's run
		bob := b.op("r0", wire.OpHTTPGet, "hj|auth=bob", 90, 305, own("hj|auth=bob", "c5"))
		b.computeFor(bob, "c5", "hj|auth=bob", "r0", 100, 298, "ok")
		q := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 150, 405, own("hj|lang=fr", "c3"))
		b.computeFor(q, "c3", "hj|lang=fr", "r0", 301, 400, "ok") // regrouped after bob's run
		b.computeFor(r, "c4", "hj|lang=fr", "r0", 301, 390, "ok") // r sent again: the URL's key
		if vs := Check(testScenario, b.h); len(vs) > 0 {
			t.Errorf("violations %v, want none", vs)
		}
	})
}

// When a request joined a run is told by when it reached the middleware,
// not by when its replica sent it, and a run's flight answers its joiners
// after its handler returned: a request that arrived in between joined it.
// A run is certainly regrouped when its request arrived while a run that
// is certainly on the URL's key still ran; an overlap of two runs of one
// variant is excused only when one may be regrouped and the other may be
// on the URL's key, on one replica or two.
func TestCheckerKnowsWhichRunARequestJoined(t *testing.T) {
	own := func(key, id string) wire.Response {
		return wire.Response{Outcome: "miss", Value: &wire.Value{Key: key, Src: "compute", ID: id, Unstored: true}}
	}
	// fr joined bob's run on r0 (arriving at first: while the run ran,
	// or as it answered), then a second request of fr ran beside its
	// regrouped run: on r0 when it arrived at second, on r1 after a run
	// there when it is not on r0.
	build := func(first int, replica string, second, arrived int) *History {
		b := newHB()
		bob := b.op("r0", wire.OpHTTPGet, "hj|auth=bob", 5, 205, own("hj|auth=bob", "c1"))
		b.computeFor(bob, "c1", "hj|auth=bob", "r0", 10, 200, "ok")
		fr := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", first, 320, own("hj|lang=fr", "c2"))
		b.computeFor(fr, "c2", "hj|lang=fr", "r0", 210, 310, "ok")
		if replica == "r1" {
			alice := b.op("r1", wire.OpHTTPGet, "hj|auth=alice", 5, 205, own("hj|auth=alice", "c3"))
			b.computeFor(alice, "c3", "hj|auth=alice", "r1", 10, 200, "ok")
		}
		o := b.op(replica, wire.OpHTTPGet, "hj|lang=fr", second, 330, own("hj|lang=fr", "c4"))
		o.Arrived = []time.Duration{at(arrived)}
		b.computeFor(o, "c4", "hj|lang=fr", replica, 212, 315, "ok")
		return b.h
	}
	for _, tc := range []struct {
		name            string
		first           int
		replica         string
		second, arrived int
		want            string
	}{
		{"fresh after the run answered", 50, "r0", 206, 206, ""},
		{"arrived after the run answered, sent while it ran", 50, "r0", 150, 206, ""},
		{"beside a request that joined the run as it answered", 202, "r0", 204, 204, ""},
		{"on a replica whose run it may have joined as it answered", 50, "r1", 199, 199, ""},
		{"joined the run while it ran", 50, "r0", 150, 150, "one compute"},
		{"joined a run on the URL's key on another replica", 50, "r1", 150, 150, "one compute"},
	} {
		if got := properties(Check(testScenario, build(tc.first, tc.replica, tc.second, tc.arrived))); got != tc.want {
			t.Errorf("%s: violations %q, want %q", tc.name, got, tc.want)
		}
	}
	// A request whose run panicked is sent again when the connection
	// drops: the run of its first attempt is judged by when that attempt
	// arrived (while bob's run ran: regrouped), not by the second's.
	{
		b := newHB()
		bob := b.op("r0", wire.OpHTTPGet, "hj|auth=bob", 5, 205, own("hj|auth=bob", "c1"))
		b.computeFor(bob, "c1", "hj|auth=bob", "r0", 10, 200, "ok")
		r := b.op("r0", wire.OpHTTPGet, "hj|lang=fr", 50, 420, own("hj|lang=fr", "c4"))
		r.Arrived = []time.Duration{at(50), at(320)}
		b.computeFor(r, "c2", "hj|lang=fr", "r0", 210, 300, "panic")
		b.computeFor(r, "c4", "hj|lang=fr", "r0", 322, 400, "ok")
		q := b.op("r1", wire.OpHTTPGet, "hj|lang=fr", 250, 320, own("hj|lang=fr", "c3"))
		q.Arrived = []time.Duration{at(250)}
		b.computeFor(q, "c3", "hj|lang=fr", "r1", 255, 315, "ok")
		if vs := Check(testScenario, b.h); len(vs) > 0 {
			t.Errorf("a request sent again after its run panicked: violations %v, want none", vs)
		}
	}
	// A run whose request left first (its deadline) goes on detached: its
	// flight answers its joiners when it ends, not when its request left.
	b := newHB()
	detachedRun(b, "r0", "hj|auth=bob", "c1", 5, 100, 10, 200)
	joinerRun(b, "r0", "hj|lang=fr", "c2", 201, 320, 205, 310)
	joinerRun(b, "r0", "hj|lang=fr", "c3", 260, 330, 262, 315)
	if vs := Check(testScenario, b.h); len(vs) > 0 {
		t.Errorf("beside a detached run's joiners: violations %v, want none", vs)
	}
}

// What the checker cannot know, it leaves open, and no more: a request
// joins a flight only after it read the key from Redis, which a latency
// fault slows (it may miss a run that ended after it arrived); a run
// whose request left ran on detached and gave its lease up within a
// second of its end; and two runs of one variant on one replica whose
// requests both arrived while the same run still ran share their fate,
// whatever that run was, so they never overlap.
func TestCheckerJoinsWithinWhatItCanKnow(t *testing.T) {
	checkCases(t, []checkCase{
		{"a slow read misses the flight", func(b *hb) {
			b.h.Events = append(b.h.Events, Event{At: at(0), What: "latency: r0 delayed 45ms each way"},
				Event{At: at(2000), What: "latency: healed", Heal: true})
			joinerRun(b, "r0", "hj|auth=bob", "c1", 40, 260, 100, 200)
			joinerRun(b, "r0", "hj|lang=fr", "c2", 120, 440, 330, 430)
			joinerRun(b, "r0", "hj|lang=fr", "c3", 190, 510, 400, 500)
		}, ""},
		{"behind a run that may be regrouped itself", func(b *hb) {
			joinerRun(b, "r0", "hj|auth=carol", "c0", 0, 160, 5, 150)
			joinerRun(b, "r0", "hj|auth=bob", "c1", 152, 305, 162, 300)
			joinerRun(b, "r0", "hj|lang=fr", "c2", 200, 460, 306, 450)
			joinerRun(b, "r0", "hj|lang=fr", "c3", 201, 462, 307, 452)
		}, "one compute"},
		{"a second past a detached run, two runs on the URL's key", func(b *hb) {
			detachedRun(b, "r0", "hj|auth=carol", "c0", 0, 90, 5, 200)
			joinerRun(b, "r0", "hj|lang=fr", "c1", 1300, 1500, 1305, 1490)
			joinerRun(b, "r1", "hj|lang=fr", "c2", 1310, 1500, 1315, 1490)
		}, "one compute"},
	})
}

// joinerRun records a GET of key on replica that arrived (and was sent) at
// arrived, returned at ret, and was answered by its own handler run id,
// which ran over [began, ended].
func joinerRun(b *hb, replica, key, id string, arrived, ret, began, ended int) *Op {
	o := b.op(replica, wire.OpHTTPGet, key, arrived, ret,
		wire.Response{Outcome: "miss", Value: &wire.Value{Key: key, Src: "compute", ID: id, Unstored: true}})
	o.Arrived = []time.Duration{at(arrived)}
	b.computeFor(o, id, key, replica, began, ended, "ok")
	return o
}

// detachedRun records a GET of key on replica sent at invoked whose
// deadline answered it at left, while its handler run id went on, detached,
// over [began, ended].
func detachedRun(b *hb, replica, key, id string, invoked, left, began, ended int) {
	o := b.op(replica, wire.OpHTTPGet, key, invoked, left, wire.Response{Err: wire.ErrDeadline},
		func(r *wire.Request) { r.Deadline = time.Duration(left-invoked) * time.Millisecond })
	b.computeFor(o, id, key, replica, began, ended, "ok")
}
