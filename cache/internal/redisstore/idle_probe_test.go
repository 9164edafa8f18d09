package redisstore

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// The idle probe PINGs a client that makes no step, once a period, and
// not at all while a step of the client got a reply within the period
// (its replies teach the budget as much: a fleet spread thin used to pay
// a probe every period on top of its traffic, issue 38) or while a
// heartbeat on it runs. Each case waits for five of the probe's periods
// to have been judged (its callbacks are asked once a period), not for a
// time.
func TestIdleProbePingsOnlyAClientWhoseStepsAreNotAnswered(t *testing.T) {
	probeEvery = 10 * time.Millisecond
	t.Cleanup(func() { probeEvery = 2 * time.Second })
	for _, tc := range []struct {
		name              string
		answered, beating bool
	}{
		{"idle", false, false},
		{"steps answered", true, false},
		{"heartbeat running", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Client(t)
			var judged, pinged atomic.Int64
			periods := make(chan struct{}, 1)
			judge := func() {
				if judged.Add(1) >= 5 {
					select {
					case periods <- struct{}{}:
					default:
					}
				}
			}
			release := ProbeIdle(rdb, func(time.Duration) { pinged.Add(1) },
				func() bool {
					judge() // asked first, once a period
					return tc.beating
				},
				func(within time.Duration) bool {
					if within != probeEvery {
						t.Errorf("answered asked about %s, want the probe's period %s", within, probeEvery)
					}
					return tc.answered
				})
			select {
			case <-periods:
			case <-time.After(10 * time.Second):
				t.Fatal("the probe judged fewer than five periods in 10 s")
			}
			release() // waits for a PING in flight
			n, judgedPeriods := pinged.Load(), judged.Load()
			if busy := tc.answered || tc.beating; busy && n != 0 {
				t.Errorf("%d PINGs over %d periods of a client whose steps are answered or whose heartbeat runs, want none", n, judgedPeriods)
			}
			if !tc.answered && !tc.beating && n < 3 {
				t.Errorf("%d PINGs over %d periods of an idle client, want one a period", n, judgedPeriods)
			}
		})
	}
}
