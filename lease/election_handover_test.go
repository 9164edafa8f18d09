package lease_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// fleet is replicas that each reach the same servers through fault proxies
// of their own, so that one replica can be cut off.
type fleet struct {
	lockers []lease.Locker
	proxies [][]*faultproxy.Proxy
}

func newFleet(t *testing.T, kind string, replicas int, opts lease.Options) fleet {
	t.Helper()
	n := 1
	if kind == "quorum" {
		n = 5
	}
	addrs, _, _ := serverAddrs(t, n)
	var f fleet
	for range replicas {
		proxies, proxied := newProxies(t, addrs)
		f.proxies = append(f.proxies, proxies)
		if kind == "quorum" {
			f.lockers = append(f.lockers, newQuorum(t, replicaClients(t, proxied), lease.QuorumOptions{Options: opts, ServerTimeout: 100 * time.Millisecond}))
			continue
		}
		// A Client's steps are bounded by the Redis client's timeouts: a
		// cut-off replica's campaign gives up after 200ms.
		rdb := redis.NewClient(&redis.Options{Addr: proxied[0], MaxRetries: -1, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		f.lockers = append(f.lockers, newClient(t, rdb, opts))
	}
	return f
}

// cut cuts replica i off from every server (on) or heals it (off).
func (f fleet) cut(i int, on bool) {
	for _, p := range f.proxies[i] {
		p.SetPartition(on)
	}
}

// job is one call of a RunEvery function: which replica ran it, when.
type job struct {
	replica    int
	start, end time.Time
}

// sample is one call of Leading: between b and a it returned v.
type sample struct {
	replica int
	b, a    time.Time
	v       bool
}

// Issue 25, case 3. Three replicas run a job every 20 ms that works 50 ms;
// the leader is cut off from the servers and another takes over. On one
// clock, no job of the old leader may overlap a job of the new one, the old
// leader starts no job once the new one has, and Leading is never true on
// the old leader after it was true on the new one.
func TestElectionHandOverNeverOverlaps(t *testing.T) {
	for _, kind := range []string{"single", "quorum"} {
		t.Run(kind, func(t *testing.T) {
			const replicas = 3
			f := newFleet(t, kind, replicas, lease.Options{})
			name := redistest.Prefix(t)
			var (
				mu       sync.Mutex
				jobs     []job
				runs     = map[int]int{}
				samples  []sample
				leading  = make(chan int, 100) // replicas, as they run their third job
				finished = make(chan error, replicas)
				cancels  []context.CancelFunc
				es       []*lease.Election
			)
			for i, l := range f.lockers {
				e := newElection(t, l, name, lease.ElectionOptions{TTL: time.Second, RetryInterval: 10 * time.Millisecond})
				es = append(es, e)
				ctx, cancel := context.WithCancel(context.Background())
				cancels = append(cancels, cancel)
				go func() {
					finished <- e.RunEvery(ctx, 20*time.Millisecond, func(ctx context.Context) error {
						j := job{replica: i, start: time.Now()}
						select {
						case <-ctx.Done():
						case <-time.After(50 * time.Millisecond): // the job's work
						}
						j.end = time.Now()
						mu.Lock()
						defer mu.Unlock()
						jobs = append(jobs, j)
						if runs[i]++; runs[i] == 3 {
							leading <- i
						}
						return nil
					})
				}()
			}
			stopSampling := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					select {
					case <-stopSampling:
						return
					default:
					}
					for i, e := range es {
						s := sample{replica: i, b: time.Now()}
						s.v = e.Leading()
						s.a = time.Now()
						mu.Lock()
						samples = append(samples, s)
						mu.Unlock()
					}
					time.Sleep(100 * time.Microsecond) // the sampling period
				}
			}()

			old := recv(t, leading, "the first leader's third job")
			f.cut(old, true)
			next := recv(t, leading, "a new leader's third job")
			if next == old {
				t.Fatal("the cut-off leader kept running the job")
			}
			close(stopSampling)
			recv(t, sampled, "the sampler's end")
			f.cut(old, false)
			for _, c := range cancels {
				c()
			}
			for range replicas {
				recv(t, finished, "RunEvery's return")
			}

			mu.Lock()
			defer mu.Unlock()
			slices.SortFunc(jobs, func(a, b job) int { return a.start.Compare(b.start) })
			var firstNew time.Time
			for _, j := range jobs {
				if j.replica == next && firstNew.IsZero() {
					firstNew = j.start
				}
			}
			for i, j := range jobs {
				for _, k := range jobs[:i] {
					if k.replica != j.replica && k.end.After(j.start) {
						t.Errorf("replica %d's job overlapped replica %d's by %s", k.replica, j.replica, k.end.Sub(j.start).Round(time.Microsecond))
					}
				}
				if j.replica == old && j.start.After(firstNew) {
					t.Errorf("the old leader started a job %s after the new leader's first", j.start.Sub(firstNew).Round(time.Microsecond))
				}
			}
			var lastOld, firstNext time.Time
			for _, s := range samples {
				switch {
				case s.replica == old && s.v:
					lastOld = s.b
				case s.replica == next && s.v && firstNext.IsZero():
					firstNext = s.a
				}
			}
			if lastOld.After(firstNext) {
				t.Errorf("Leading was true on the old leader %s after it was on the new one", lastOld.Sub(firstNext).Round(time.Microsecond))
			}
			t.Logf("%d jobs, %d samples of Leading; the old leader's last job ended %s before the new leader's first began",
				len(jobs), len(samples), firstNew.Sub(lastEnd(jobs, old)).Round(time.Microsecond))
		})
	}
}

// lastEnd is when replica's last job ended.
func lastEnd(jobs []job, replica int) time.Time {
	var t time.Time
	for _, j := range jobs {
		if j.replica == replica && j.end.After(t) {
			t = j.end
		}
	}
	return t
}

// A leader whose renewals fail starts no job with less than its extension
// interval (a third of the TTL here) of validity left: once a renewal is
// late it runs only the job it is in, which its deadline cancels.
func TestElectionStartsNoJobOnALateRenewal(t *testing.T) {
	const ttl = 600 * time.Millisecond
	var (
		mu    sync.Mutex
		l     *lease.Lease
		lefts []time.Duration // the validity left at each job's start, once l is known
	)
	renewed := make(chan struct{}, 100)
	f := newFleet(t, "single", 1, lease.Options{OnExtend: func(got *lease.Lease, err error) {
		if err == nil {
			mu.Lock()
			l = got
			mu.Unlock()
			renewed <- struct{}{}
		}
	}})
	ended := make(chan struct{})
	e := newElection(t, f.lockers[0], redistest.Prefix(t), lease.ElectionOptions{TTL: ttl, RetryInterval: time.Hour,
		OnChange: func(leading bool, _ int64) {
			if !leading {
				close(ended)
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.RunEvery(ctx, 5*time.Millisecond, func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if l != nil {
				lefts = append(lefts, time.Until(l.Until()))
			}
			return nil
		})
	}()
	recv(t, renewed, "a renewal")
	f.cut(0, true)
	recv(t, ended, "the end of the term")
	cancel()
	f.cut(0, false)
	recv(t, done, "RunEvery's return")
	mu.Lock()
	defer mu.Unlock()
	for i, left := range lefts {
		if left < ttl/3/2 {
			t.Fatalf("job %d of %d started with %s of validity left", i, len(lefts), left.Round(time.Microsecond))
		}
	}
	t.Logf("%d jobs after the first renewal, the least validity left at a start %s", len(lefts), slices.Min(lefts).Round(time.Millisecond))
}
