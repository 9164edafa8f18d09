package cache

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	in := envelope{Flags: 1, Type: 0xdeadbeef, Created: 1_700_000_000_000, FreshUntil: 1_700_003_600_000, StaleUntil: 1_700_004_200_000, ErrorUntil: 1_700_090_000_000, ComputeMicros: 42, Value: []byte("payload")}
	b, err := encodeEnvelope(&in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flags != in.Flags || out.Type != in.Type || out.Created != in.Created || out.FreshUntil != in.FreshUntil || out.StaleUntil != in.StaleUntil ||
		out.ErrorUntil != in.ErrorUntil || out.ComputeMicros != 42 || !bytes.Equal(out.Value, in.Value) {
		t.Fatalf("round trip: %+v", out)
	}
	// Compact: header, created in unix ms, three windows and the compute
	// time as small uvarints, and the value.
	if overhead := len(b) - len(in.Value); overhead > 26 {
		t.Fatalf("envelope overhead %d bytes, want at most 26", overhead)
	}
}

// The stamp (generation and tags) round-trips, costs nothing on an entry
// without one, and a bad one is corrupt, never a panic.
func TestEnvelopeStamp(t *testing.T) {
	plain := envelope{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4, Value: []byte("v")}
	stamped := plain
	stamped.Flags, stamped.Gen, stamped.Tags = flagStamped, 300, []string{"a", "user:42"}
	pb, sb := mustEncode(t, plain), mustEncode(t, stamped)
	if extra := len(sb) - len(pb); extra != 2+1+2+8 {
		t.Fatalf("stamp of gen 300 and tags a, user:42: %d bytes", extra)
	}
	out, err := decodeEnvelope(sb)
	if err != nil || out.Gen != 300 || !slices.Equal(out.Tags, stamped.Tags) || string(out.Value) != "v" {
		t.Fatalf("round trip: %+v %v", out, err)
	}
	for name, e := range map[string]envelope{
		"flag without stamp": {Flags: flagStamped, Created: 1, FreshUntil: 1, StaleUntil: 1, ErrorUntil: 1},
		"stamp without flag": {Gen: 1, Created: 1, FreshUntil: 1, StaleUntil: 1, ErrorUntil: 1},
	} {
		if _, err := encodeEnvelope(&e); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	bad := slices.Clone(sb)
	bad[len(pb)+3] = '{' // the first tag's byte: gen (2), count, length, then the tag
	for name, b := range map[string][]byte{"bad tag byte": bad, "truncated": sb[:len(pb)+2]} {
		if _, err := decodeEnvelope(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestEnvelopeRejects(t *testing.T) {
	good := mustEncode(t, envelope{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 3})
	header := good[:envelopeHeader]
	cases := map[string][]byte{
		"nil":         nil,
		"short":       good[:3],
		"truncated":   good[:len(good)-2],
		"json":        []byte(`{"a":1}`),
		"no created":  append(slices.Clone(header), 0, 1, 1, 0, 0),
		"non-minimal": append(slices.Clone(header), 0x81, 0x00, 1, 1, 0, 0),
		"too large":   append(slices.Clone(header), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 1, 0, 0),
		"overflow":    append(slices.Clone(header), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0),
		"future":      append([]byte{envelopeMagic, envelopeVersion + 1}, good[2:]...),
		"old v2":      {0x9b, 0xcd, 0x53, 0x50, 0x02, 0x00},
		"flags":       append([]byte{envelopeMagic, envelopeVersion, 0x80}, good[3:]...),
	}
	for name, b := range cases {
		if _, err := decodeEnvelope(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	for name, e := range map[string]envelope{
		"fresh<create": {Created: 5, FreshUntil: 4, StaleUntil: 6, ErrorUntil: 6},
		"stale<fresh":  {Created: 1, FreshUntil: 4, StaleUntil: 3, ErrorUntil: 4},
		"error<stale":  {Created: 1, FreshUntil: 4, StaleUntil: 5, ErrorUntil: 4},
		"no created":   {Created: 0, FreshUntil: 4, StaleUntil: 5, ErrorUntil: 5},
	} {
		if _, err := encodeEnvelope(&e); err == nil {
			t.Errorf("%s: encoded without error", name)
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

// FuzzDecodeEnvelope: whatever decodes is consistent, and it is the one
// encoding of its envelope (the decoder is strict: it re-encodes to the same
// bytes).
func FuzzDecodeEnvelope(f *testing.F) {
	good, _ := encodeEnvelope(&envelope{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4, Value: []byte("v")})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{envelopeMagic, envelopeVersion, 0, 0, 0, 0, 0})
	stamped, _ := encodeEnvelope(&envelope{Flags: flagStamped, Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4, Gen: 300, Tags: []string{"a", "user:42"}, Value: []byte("v")})
	f.Add(stamped)
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
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded envelope differs:\n%x\n%x", b, again)
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

// waitForConfirmations yields a little so pub/sub confirmations can arrive.
func waitForConfirmations() { time.Sleep(time.Millisecond) }
