package cache

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/stale"
)

// The callers that share one GET share its decode (the envelope's header),
// never its value: each gets a copy of its own. A reply with other bytes is
// decoded afresh, even when it holds the same envelope; one that does not
// decode is corrupt for every caller that reads it, each counted.
func TestSharedReadsShareTheDecodeNotTheValue(t *testing.T) {
	c, err := New[[]byte](nil, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := &redisStore[[]byte]{c: c}
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	envelope := func(v string, fresh time.Duration) reply {
		w := stale.Windows{Created: now, FreshUntil: now.Add(fresh), StaleUntil: now.Add(fresh), ErrorUntil: now.Add(fresh)}
		b, err := c.encodeEntry(entry[[]byte]{value: []byte(v), w: w})
		if err != nil {
			t.Fatal(err)
		}
		return reply{Envelope: string(b), Found: true}
	}
	read := func(r reply) entry[[]byte] {
		t.Helper()
		var own entry[[]byte]
		e, v := s.sharedEntry(ctx, "k", r, &own)
		if e == nil {
			t.Fatal("not found")
		}
		if e.value != nil && e != &own {
			t.Fatalf("the shared decode holds a value: %q", e.value)
		}
		full := *e
		full.value = v
		return full
	}
	kept := func(r reply) bool {
		d := s.shared.Load()
		return d != nil && unsafe.StringData(d.env) == unsafe.StringData(r.Envelope)
	}
	a, b := envelope("aaaa", time.Minute), envelope("bbbb", time.Hour)
	e1 := read(a)
	if kept(a) {
		t.Fatal("a reply read once is kept (an allocation a GET nobody shares does not need)")
	}
	e1.value[0] = 'x' // the caller's own copy
	e2 := read(a)
	if !kept(a) {
		t.Fatal("a reply read twice is not kept for the callers that share it")
	}
	if e := read(a); string(e.value) != "aaaa" {
		t.Fatalf("third read of the same reply: %q", e.value)
	}
	if string(e2.value) != "aaaa" || !e2.w.FreshUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("second read of the same reply: %q fresh until %v", e2.value, e2.w.FreshUntil)
	}
	if &e1.value[0] == &e2.value[0] {
		t.Fatal("two callers share one value")
	}
	if e := read(b); string(e.value) != "bbbb" || !e.w.FreshUntil.Equal(now.Add(time.Hour)) {
		t.Fatalf("another reply: %q fresh until %v", e.value, e.w.FreshUntil)
	}
	again := reply{Envelope: strings.Clone(a.Envelope), Found: true} // a's envelope, other bytes
	if e := read(again); !bytes.Equal(e.value, []byte("aaaa")) || !e.w.FreshUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("a's envelope in other bytes: %q fresh until %v", e.value, e.w.FreshUntil)
	}
	bad := reply{Envelope: "not an envelope", Found: true}
	before := c.Stats().Corrupt
	for range 2 {
		var own entry[[]byte]
		if e, _ := s.sharedEntry(ctx, "k", bad, &own); e != nil {
			t.Fatal("corrupt reply found")
		}
	}
	if n := c.Stats().Corrupt - before; n != 2 {
		t.Fatalf("corrupt reads counted %d times, want 2", n)
	}
}
