package notify

// Closing the notifier races with queued and in-flight sends, joins, leaves
// and broken connections: nothing panics, every call returns, and every
// goroutine ends.

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Guarantee 5: close racing with queued and in-flight sends, with waiters
// joining and leaving (some while their subscribe is still queued), and
// with connections broken by CLIENT KILL (a drop racing with the
// resubscriber on a Cluster, a reset on a plain connection). Nothing
// panics, every subscribe and waiter close returns, subscribes after close
// return errClosed, and every goroutine ends.
func TestOutboxCloseRacesEverything(t *testing.T) {
	cases := []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
		addrs  func(t *testing.T) []string
	}{
		{"plain", func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, func(t *testing.T) []string { return []string{redistest.Addr(t)} }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t) }, func(t *testing.T) []string { return redistest.Cluster(t).Addrs() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kill := killPubSub(tc.addrs(t)...)
			chans := hashTagged(t, 12)
			for iter := range 6 {
				n := newNotifier(tc.client(t))
				var wg sync.WaitGroup
				var joins atomic.Int64
				closing := make(chan struct{})
				for g := range 60 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(g), uint64(iter)))
						for {
							ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(5))*time.Millisecond)
							w, err := n.Subscribe(ctx, chans[r.IntN(len(chans))])
							cancel()
							joins.Add(1)
							w.Close()
							select {
							case <-closing:
								if !errors.Is(err, errClosed) {
									// Joined before close: any answer; the next one must be errClosed.
									w, err = n.Subscribe(context.Background(), chans[0])
									w.Close()
									if !errors.Is(err, errClosed) {
										t.Errorf("subscribe after close: %v, want errClosed", err)
									}
								}
								return
							default:
							}
						}
					})
				}
				for joins.Load() < 300 {
					runtime.Gosched()
				}
				if iter%2 == 1 {
					kill()
				}
				for joins.Load() < 600 {
					runtime.Gosched()
				}
				start := time.Now()
				if err := n.Close(); err != nil {
					t.Fatal(err)
				}
				close(closing)
				if took := time.Since(start); took > closeGrace+time.Second {
					t.Errorf("close took %s", took)
				}
				done := make(chan struct{})
				go func() { wg.Wait(); n.wire.Wait(); n.bg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("iteration %d: waiters or the notifier's goroutines still running 10 s after close", iter)
				}
				if err := n.Close(); err != nil {
					t.Errorf("second close: %v", err)
				}
			}
		})
	}
}
