package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// lockers returns a new locker per replica: each its own Client on the
// package server, or its own Quorum over three servers of the test's own.
func lockers(t *testing.T, kind string, replicas int) []lease.Locker {
	t.Helper()
	var addrs []string
	if kind == "quorum" {
		addrs, _, _ = serverAddrs(t, 3)
	}
	out := make([]lease.Locker, replicas)
	for i := range out {
		if kind == "quorum" {
			out[i] = newQuorum(t, replicaClients(t, addrs), lease.QuorumOptions{})
		} else {
			out[i] = newClient(t, redistest.Client(t), lease.Options{})
		}
	}
	return out
}

func newElection(t *testing.T, l lease.Locker, name string, opts lease.ElectionOptions) *lease.Election {
	t.Helper()
	e, err := lease.NewElection(l, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Several replicas run the same periodic job: only the leader runs it,
// never two at once; when the leader shuts down another takes over, and
// every term's fence is above the one before.
func TestElectionRunEveryOnOneReplica(t *testing.T) {
	for _, kind := range []string{"single", "quorum"} {
		t.Run(kind, func(t *testing.T) {
			const replicas, runsPerLeader = 3, 10
			name := redistest.Prefix(t)
			var (
				inside  atomic.Int32
				mu      sync.Mutex
				runs    = map[int]int{} // replica -> runs of the job
				terms   []int64         // fences, in the order the terms began
				enough  = make(chan int, replicas)
				errs    = make(chan error, replicas)
				cancels []context.CancelFunc
			)
			for i, l := range lockers(t, kind, replicas) {
				e := newElection(t, l, name, lease.ElectionOptions{
					TTL: 2 * time.Second, RetryInterval: 5 * time.Millisecond,
					OnChange: func(leading bool, fence int64) {
						if leading {
							mu.Lock()
							terms = append(terms, fence)
							mu.Unlock()
						}
					},
					OnError: func(err error) {
						if !errors.Is(err, lease.ErrNoQuorum) { // a slow server on a busy machine is not a failure
							t.Errorf("replica %d: %v", i, err)
						}
					},
				})
				ctx, cancel := context.WithCancel(context.Background())
				cancels = append(cancels, cancel)
				go func() {
					errs <- e.RunEvery(ctx, time.Millisecond, func(ctx context.Context) error {
						if n := inside.Add(1); n != 1 {
							t.Errorf("%d replicas run the job at once", n)
						}
						defer inside.Add(-1)
						if !e.Leading() {
							t.Errorf("replica %d runs the job without leading", i)
						}
						mu.Lock()
						defer mu.Unlock()
						if runs[i]++; runs[i] == runsPerLeader {
							enough <- i
						}
						return nil
					})
				}()
			}
			first := recv(t, enough, "the first leader's runs")
			cancels[first]() // the leader shuts down: it resigns
			second := recv(t, enough, "the next leader's runs")
			if second == first {
				t.Fatal("the stopped replica kept running the job")
			}
			for _, c := range cancels {
				c()
			}
			for range replicas {
				if err := recv(t, errs, "RunEvery's return"); !errors.Is(err, context.Canceled) {
					t.Fatalf("RunEvery: %v", err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i, n := range runs {
				if i != first && i != second && n != 0 {
					t.Fatalf("replica %d ran the job %d times", i, n)
				}
			}
			if len(terms) < 2 {
				t.Fatalf("%d terms, want the first leader's and its successor's", len(terms))
			}
			for i := 1; i < len(terms); i++ {
				if terms[i] <= terms[i-1] {
					t.Fatalf("term %d's fence %d not above %d", i, terms[i], terms[i-1])
				}
			}
		})
	}
}

// The leader's lease is taken from it (as after a pause past its TTL):
// the job's context is cancelled with ErrLeaseLost, the replica stops
// leading, and it campaigns again.
func TestElectionLeaseLostCancelsTheJob(t *testing.T) {
	rdb := redistest.Client(t)
	name := redistest.Prefix(t)
	changes := make(chan bool, 100)
	e := newElection(t, newClient(t, rdb, lease.Options{ExtendInterval: 5 * time.Millisecond}), name, lease.ElectionOptions{
		TTL: time.Minute, RetryInterval: 5 * time.Millisecond,
		OnChange: func(leading bool, _ int64) {
			select {
			case changes <- leading:
			default:
				t.Error("OnChange called more than 100 times")
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{}, 100)
	causes := make(chan error, 100)
	done := make(chan error, 1)
	go func() {
		done <- e.RunEvery(ctx, time.Hour, func(ctx context.Context) error {
			started <- struct{}{}
			waitCtx(t, ctx, "the job's context")
			causes <- context.Cause(ctx)
			return nil
		})
	}()
	recv(t, started, "the job")
	if !recv(t, changes, "OnChange") || !e.Leading() {
		t.Fatal("not leading while running the job")
	}
	key, _ := lease.Keys(name)
	if err := rdb.Set(context.Background(), key, "another-replica", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, causes, "the job's end"); !errors.Is(cause, lease.ErrLeaseLost) {
		t.Fatalf("job's context cause %v, want ErrLeaseLost", cause)
	}
	if recv(t, changes, "OnChange") {
		t.Fatal("OnChange did not report the loss")
	}
	// The other "replica" lets its lease expire; this one leads again.
	recv(t, started, "the job, in the next term")
	if !recv(t, changes, "OnChange") {
		t.Fatal("did not lead again")
	}
	cancel()
	recv(t, causes, "the job's end")
	if err := recv(t, done, "RunEvery's return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunEvery: %v", err)
	}
	if e.Leading() {
		t.Fatal("still leading after RunEvery returned")
	}
}

// Campaign and Resign by hand: a follower blocks until the leader resigns.
func TestElectionCampaignResign(t *testing.T) {
	ctx := context.Background()
	name := redistest.Prefix(t)
	// A TTL beyond the tests' bound: the follower gets the lease only by
	// the leader's resignation.
	a := newElection(t, newClient(t, redistest.Client(t), lease.Options{}), name, lease.ElectionOptions{TTL: time.Minute})
	b := newElection(t, newClient(t, redistest.Client(t), lease.Options{}), name, lease.ElectionOptions{RetryInterval: time.Millisecond})
	ta, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lease.Term, 1)
	go func() {
		tb, err := b.Campaign(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- tb
	}()
	if b.Leading() {
		t.Fatal("two leaders")
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ta.Context().Err() == nil || a.Leading() {
		t.Fatal("resigned term still alive")
	}
	tb := recv(t, got, "the follower's campaign")
	if tb == nil {
		t.FailNow()
	}
	if !b.Leading() || tb.Fence() <= ta.Fence() {
		t.Fatalf("leading=%v fence %d after %d", b.Leading(), tb.Fence(), ta.Fence())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Campaign(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("campaign with a cancelled context: %v", err)
	}
}

func TestElectionBadInput(t *testing.T) {
	c := newClient(t, redistest.Client(t), lease.Options{})
	e := newElection(t, c, "k", lease.ElectionOptions{})
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"nil locker", func() error { _, err := lease.NewElection(nil, "k", lease.ElectionOptions{}); return err }, lease.ErrInvalidOptions},
		{"empty name", func() error { _, err := lease.NewElection(c, "", lease.ElectionOptions{}); return err }, lease.ErrInvalidName},
		{"negative TTL", func() error { _, err := lease.NewElection(c, "k", lease.ElectionOptions{TTL: -1}); return err }, lease.ErrInvalidOptions},
		{"negative retry", func() error {
			_, err := lease.NewElection(c, "k", lease.ElectionOptions{RetryInterval: -1})
			return err
		}, lease.ErrInvalidOptions},
		{"nil fn", func() error { return e.RunEvery(context.Background(), time.Second, nil) }, lease.ErrInvalidOptions},
		{"zero interval", func() error {
			return e.RunEvery(context.Background(), 0, func(context.Context) error { return nil })
		}, lease.ErrInvalidOptions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !errors.Is(err, tc.want) {
				t.Fatalf("err=%v, want %v", err, tc.want)
			}
		})
	}
}

// A term is renewed for as long as it lasts: the locker's MaxExtensions,
// which bounds one Using, does not end a leader's term.
func TestElectionTermOutlivesMaxExtensions(t *testing.T) {
	ctx := context.Background()
	opts, extended := extensions(lease.Options{MaxExtensions: 2, ExtendInterval: 10 * time.Millisecond})
	e := newElection(t, newClient(t, redistest.Client(t), opts), redistest.Prefix(t), lease.ElectionOptions{TTL: 300 * time.Millisecond})
	term, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitExtended(t, extended, 10)
	if err := context.Cause(term.Context()); err != nil || !e.Leading() {
		t.Fatalf("term ended after %d renewals: %v", 10, err)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
