package cache

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	in := envelope{Created: 1000, FreshUntil: 2000, StaleUntil: 3000, ErrorUntil: 4000, ComputeMicros: 42, Fence: 7, Value: []byte("payload")}
	b, err := encodeEnvelope(&in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Created != 1000 || out.FreshUntil != 2000 || out.StaleUntil != 3000 || out.ErrorUntil != 4000 || out.ComputeMicros != 42 || out.Fence != 7 || !bytes.Equal(out.Value, in.Value) {
		t.Fatalf("round trip: %+v", out)
	}
}

func TestEnvelopeRejects(t *testing.T) {
	good, _ := encodeEnvelope(&envelope{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 3})
	cases := map[string][]byte{
		"nil":          nil,
		"short":        good[:3],
		"truncated":    good[:len(good)-2],
		"json":         []byte(`{"a":1}`),
		"fresh<create": mustEncode(t, envelope{Created: 5, FreshUntil: 4, StaleUntil: 6, ErrorUntil: 6}),
		"stale<fresh":  mustEncode(t, envelope{Created: 1, FreshUntil: 4, StaleUntil: 3, ErrorUntil: 4}),
		"error<stale":  mustEncode(t, envelope{Created: 1, FreshUntil: 4, StaleUntil: 5, ErrorUntil: 4}),
		"no created":   mustEncode(t, envelope{Created: 0, FreshUntil: 4, StaleUntil: 5, ErrorUntil: 5}),
		"future":       append([]byte{0x9b, 0xcd, 0x53, 0x50, 0x03}, good[5:]...),
	}
	for name, b := range cases {
		if _, err := decodeEnvelope(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func mustEncode(t *testing.T, e envelope) []byte {
	t.Helper()
	b, err := encodeEnvelope(&e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeEnvelope(f *testing.F) {
	good, _ := encodeEnvelope(&envelope{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4, Value: []byte("v")})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x9b, 0xcd, 0x53, 0x50})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		if err != nil {
			return
		}
		if e.Created <= 0 || e.FreshUntil < e.Created || e.StaleUntil < e.FreshUntil || e.ErrorUntil < e.StaleUntil {
			t.Fatalf("accepted an inconsistent envelope %+v", e)
		}
		again, err := encodeEnvelope(&e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeEnvelope(again); err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
	})
}

func TestPollDelayBounds(t *testing.T) {
	c := &Cache[int]{opts: Options{PollInterval: 160 * time.Millisecond}}
	for attempt := range 40 {
		for range 50 {
			d := c.pollDelay(attempt, 0)
			if d <= 0 || d > 160*time.Millisecond {
				t.Fatalf("attempt %d: %s", attempt, d)
			}
			if d2 := c.pollDelay(attempt, 3*time.Millisecond); d2 > 4*time.Millisecond {
				t.Fatalf("delay %s ignores the holder's remaining 3ms", d2)
			}
		}
	}
}

// Subscriptions live only while a key has waiters: after many waits on
// distinct keys, none is left.
func TestSubscriptionsAreReleased(t *testing.T) {
	rdb := redistest.Client(t)
	n := newNotifier(rdb)
	defer n.close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ch := redistest.Prefix(t) + string(rune('a'+i%26))
			w, err := n.subscribe(ctx, ch)
			if err != nil {
				t.Error(err)
			}
			w.close()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for n.subscriptions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d channel states left", n.subscriptions())
		}
		time.Sleep(time.Millisecond) // unsubscribe confirmations arrive asynchronously
	}
	// Redis agrees: no channel of ours is subscribed.
	chans, err := rdb.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(chans) != 0 {
		t.Fatalf("still subscribed on the server: %v", chans)
	}
}

// A notification published after subscribe returns is always delivered.
func TestNotificationAfterSubscribeIsDelivered(t *testing.T) {
	rdb := redistest.Client(t)
	pub := redistest.Client(t)
	n := newNotifier(rdb)
	defer n.close()
	ctx := context.Background()
	for i := range 50 {
		ch := redistest.Prefix(t)
		w, err := n.subscribe(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, ch, "1").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.C:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: notification lost", i)
		}
		w.close()
	}
	var _ redis.UniversalClient = rdb
}

// The hand-written envelope is plain msgpack: the msgpack library reads it.
func TestEnvelopeIsMsgpack(t *testing.T) {
	b := mustEncode(t, envelope{Flags: 1, Type: 7, Created: 10, FreshUntil: 20, StaleUntil: 30, ErrorUntil: 40, ComputeMicros: 5, Fence: 3, Value: []byte("xyz")})
	var fields []any
	if err := msgpack.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	if len(fields) != 11 || fmt.Sprint(fields[:10]) != "[21328 2 1 7 10 20 30 40 5 3]" || string(fields[10].([]byte)) != "xyz" {
		t.Fatalf("msgpack sees %v", fields)
	}
	// And a msgpack encoder's compact integers decode too.
	alt, err := msgpack.Marshal([]any{uint16(envelopeMagic), envelopeVersion, 0, 7, 10, 20, 30, 40, 5, 3, []byte("xyz")})
	if err != nil {
		t.Fatal(err)
	}
	e, err := decodeEnvelope(alt)
	if err != nil || e.Created != 10 || e.StaleUntil != 30 || string(e.Value) != "xyz" {
		t.Fatalf("compact encoding: %+v %v", e, err)
	}
}

// waitForConfirmations yields a little so pub/sub confirmations can arrive.
func waitForConfirmations() { time.Sleep(time.Millisecond) }
