package cache

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/scripts"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The namespace's invalidation counter moves on to max(G + step, floor +
// step, the server's clock in µs) and never down (advance.lua): a missing
// counter (Redis lost it) starts past every generation of the clock's past,
// a floor above the clock (a process that saw more than the server's clock
// says) is respected, a restore (step 0) never lowers it, and the digits
// stored and announced are exact (no 1.7e+15).
func TestInvalidationCounterAdvance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds the waits for the announcement
	defer cancel()
	rdb := redistest.Client(t)
	key := "{" + redistest.Prefix(t) + "}:inv"
	advance := func(floor uint64, step int) uint64 {
		t.Helper()
		g, err := scripts.Counter.Run(ctx, rdb, []string{key}, floor, step).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if stored, err := rdb.HGet(ctx, key, "g").Result(); err != nil || stored != strconv.FormatInt(g, 10) {
			t.Fatalf("stored %q (%v), returned %d", stored, err, g)
		}
		return uint64(g)
	}
	tm, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	before := uint64(tm.UnixMicro())
	g1 := advance(0, 1)
	if g1 < before {
		t.Fatalf("a new counter starts at %d, below the server's clock %d µs", g1, before)
	}
	if g2 := advance(0, 1); g2 <= g1 {
		t.Fatalf("a tick went from %d to %d", g1, g2)
	}
	far := g1 + 1_000_000_000_000 // a floor well ahead of the clock
	if g := advance(far, 1); g != far+1 {
		t.Fatalf("a tick with floor %d gave %d, want %d", far, g, far+1)
	}
	if g := advance(far+10, 0); g != far+10 {
		t.Fatalf("a restore to %d gave %d", far+10, g)
	}
	if g := advance(0, 0); g != far+10 {
		t.Fatalf("a restore below the counter moved it to %d, want it left at %d", g, far+10)
	}
	// Clear moves the same counter, and its mark and announcement carry it
	// exactly.
	sub := rdb.Subscribe(ctx, "clear-test")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := scripts.Clear.Run(ctx, rdb, []string{key}, "h", "clear-test", "\x00h ", far+100).Int64()
	if err != nil || g != int64(far+101) {
		t.Fatalf("clear with floor %d: %d %v, want %d", far+100, g, err, far+101)
	}
	if h, err := rdb.HGet(ctx, key, "h").Result(); err != nil || h != strconv.FormatInt(g, 10) {
		t.Fatalf("clear's mark %q (%v), want %d", h, err, g)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "\x00h "+strconv.FormatInt(g, 10)+" *" {
		t.Fatalf("clear's announcement %q (%v)", msg.Payload, err)
	}
}
