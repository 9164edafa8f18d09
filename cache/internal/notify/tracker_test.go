package notify

// Trackers (track.go): a key's channel held for L1, heard through hooks.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// trackLog records a tracker's hooks, in order.
type trackLog struct {
	mu     sync.Mutex
	events []string
}

func (l *trackLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *trackLog) hooks() *Track {
	return &Track{
		Opened:  func() { l.add("opened") },
		Message: func(p string) { l.add("message " + p) },
		Lost:    func() { l.add("lost") },
	}
}

// wait polls until the log ends with want (the receiver runs the hooks
// asynchronously), bounded.
func (l *trackLog) wait(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		last := ""
		if len(l.events) > 0 {
			last = l.events[len(l.events)-1]
		}
		events := append([]string(nil), l.events...)
		l.mu.Unlock()
		if last == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hooks %q, want them to end with %q", events, want)
		}
		time.Sleep(time.Millisecond) // the receiver answers asynchronously: poll
	}
}

// A tracker opens once Redis confirmed its subscription, hears every
// message published after, and, on a break of its connection, is lost and
// then opened again once the channel is subscribed anew: on the plain
// connection (a single Redis) and on a master's sharded one (a Cluster),
// where a break is also go-redis resubscribing on a socket it redialled
// inside a call that succeeded (a confirmation no SSUBSCRIBE of ours
// asked for).
func TestTrackerOpensHearsAndIsLostOnABreak(t *testing.T) {
	for _, topo := range []string{"single", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var rdb redis.UniversalClient
			if topo == "single" {
				rdb = redistest.Client(t)
			} else {
				rdb = redistest.ClusterClientFor(t, redistest.Cluster(t))
			}
			ch := hashTagged(t, 1)[0]
			publish := func(p string) {
				t.Helper()
				var err error
				if topo == "single" {
					err = rdb.Publish(ctx, ch, p).Err()
				} else {
					err = rdb.SPublish(ctx, ch, p).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			n := newNotifier(rdb)
			defer n.Close()
			log := &trackLog{}
			w, err := n.Track(ctx, ch, log.hooks())
			if err != nil {
				t.Fatal(err)
			}
			log.wait(t, "opened")
			publish("one")
			log.wait(t, "message one")

			n.mu.Lock()
			c := n.chans[ch].conn
			n.mu.Unlock()
			if topo == "single" {
				n.reset(c) // what the receiver does when the socket breaks
			} else {
				n.confirm(c, "ssubscribe", ch) // go-redis resubscribing on a new socket
			}
			log.wait(t, "opened")
			log.mu.Lock()
			if got := log.events[len(log.events)-2]; got != "lost" {
				t.Errorf("before it opened again: %q, want lost", got)
			}
			log.mu.Unlock()
			publish("two")
			log.wait(t, "message two")

			w.Close()
			deadline := time.Now().Add(10 * time.Second)
			for n.Subscriptions() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%d channels left subscribed after the tracker closed", n.Subscriptions())
				}
				time.Sleep(time.Millisecond) // the unsubscribe's confirmation: poll
			}
		})
	}
}
