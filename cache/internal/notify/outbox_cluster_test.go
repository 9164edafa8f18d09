package notify

// The outbox on a Cluster with one silent master: joins on its channels end
// at their deadlines while the other masters' channels go on as usual.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Guarantee 4 on a Cluster: one master goes silent (it accepts and never
// answers), the others stay healthy. Joins on the silent master's channels
// end at their deadlines; joins, fills and closes on the other masters'
// channels go on as usual meanwhile; close returns within its grace. Both
// with the silent master's connection made before it went silent (its
// commands are written and never answered) and made after (its sender is
// stuck in the handshake, go-redis' default 3 s ReadTimeout).
func TestOutboxClusterOneSilentMaster(t *testing.T) {
	for _, connectedFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("connectedFirst=%v", connectedFirst), func(t *testing.T) {
			cl := redistest.Cluster(t)
			admin := redistest.ClusterClientFor(t, cl)
			chans := hashTagged(t, 30)
			silent := slotOwner(t, admin, chans[0])
			var onSilent, healthy []string
			for _, ch := range chans {
				if slotOwner(t, admin, ch) == silent {
					onSilent = append(onSilent, ch)
				} else {
					healthy = append(healthy, ch)
				}
			}
			if len(healthy) == 0 || len(onSilent) < 2 {
				t.Fatalf("channels: %d on the silent master, %d elsewhere", len(onSilent), len(healthy))
			}
			cc, p := viaProxyFor(t, cl, silent, redis.ClusterOptions{}) // go-redis' default timeouts
			n := newNotifier(cc)
			ctx := context.Background()
			if connectedFirst {
				w, err := n.Subscribe(ctx, onSilent[0])
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			p.SetPartition(true)
			const deadline = 150 * time.Millisecond
			const slack = 450 * time.Millisecond // a generous bound for a loaded machine
			var wg sync.WaitGroup
			for i := range 40 {
				ch := onSilent[1+i%(len(onSilent)-1)]
				wg.Go(func() {
					sctx, cancel := context.WithTimeout(ctx, deadline)
					defer cancel()
					start := time.Now()
					w, err := n.Subscribe(sctx, ch)
					if took := time.Since(start); took > deadline+slack {
						t.Errorf("subscribe on the silent master took %s (%v)", took, err)
					}
					start = time.Now()
					w.Close()
					if took := time.Since(start); took > slack {
						t.Errorf("closing a waiter on the silent master took %s", took)
					}
				})
			}
			for i := range 60 {
				ch := healthy[i%len(healthy)]
				wg.Go(func() {
					sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					start := time.Now()
					w, err := n.Subscribe(sctx, ch)
					if err != nil {
						w.Close() // registered all the same: see Subscribe
						t.Errorf("subscribe on a healthy master: %v", err)
						return
					}
					defer w.Close()
					if took := time.Since(start); took > slack {
						t.Errorf("subscribe on a healthy master took %s while another is silent", took)
					}
					token := "fill-" + strconv.Itoa(i)
					if err := admin.SPublish(sctx, ch, token).Err(); err != nil {
						t.Error(err)
						return
					}
					for {
						select {
						case <-w.C:
							if p := w.Take(); p != "" {
								return // this fill, or another published after this waiter subscribed
							}
						case <-sctx.Done():
							t.Errorf("a fill on a healthy master never woke its waiter while another master is silent")
							return
						}
					}
				})
			}
			wg.Wait()
			closeWithin(t, n, closeGrace+slack) // with one master silent
			p.SetPartition(false)
			if !waitAtMost(&n.wire, 20*time.Second) {
				t.Fatal("the goroutines caught on the silent master did not end after go-redis' timeouts")
			}
		})
	}
}
