package envelope

import (
	"bytes"
	"slices"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	in := Header{Flags: 1, Type: 0xdeadbeef, Created: 1_700_000_000_000, FreshUntil: 1_700_003_600_000, StaleUntil: 1_700_004_200_000, ErrorUntil: 1_700_090_000_000, ComputeMicros: 42}
	value := []byte("payload")
	b, err := Encode(&in, value)
	if err != nil {
		t.Fatal(err)
	}
	out, v, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flags != in.Flags || out.Type != in.Type || out.Created != in.Created || out.FreshUntil != in.FreshUntil || out.StaleUntil != in.StaleUntil ||
		out.ErrorUntil != in.ErrorUntil || out.ComputeMicros != 42 || !bytes.Equal(v, value) {
		t.Fatalf("round trip: %+v %q", out, v)
	}
	// Compact: header, created in unix ms, three windows and the compute
	// time as small uvarints, and the value.
	if overhead := len(b) - len(value); overhead > 26 {
		t.Fatalf("envelope overhead %d bytes, want at most 26", overhead)
	}
	if !Is(string(b)) || Value(string(b)) != "payload" {
		t.Fatalf("Is %v, Value %q", Is(string(b)), Value(string(b)))
	}
	if Is("") || Is("{}") || Value(string(b[:len(b)-len(value)-1])) != "" {
		t.Fatal("a marker, an empty payload or a truncated envelope taken for an envelope's value")
	}
}

// The stamp (generation and tags) round-trips, costs nothing on an entry
// without one, and a bad one is corrupt, never a panic.
func TestEnvelopeStamp(t *testing.T) {
	plain := Header{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4}
	stamped := plain
	stamped.Flags, stamped.Gen, stamped.Tags = FlagStamped, 300, []string{"a", "user:42"}
	pb, sb := mustEncode(t, plain, "v"), mustEncode(t, stamped, "v")
	if extra := len(sb) - len(pb); extra != 2+1+2+8 {
		t.Fatalf("stamp of gen 300 and tags a, user:42: %d bytes", extra)
	}
	out, v, err := Decode(sb)
	if err != nil || out.Gen != 300 || !slices.Equal(out.Tags, stamped.Tags) || string(v) != "v" {
		t.Fatalf("round trip: %+v %q %v", out, v, err)
	}
	for name, h := range map[string]Header{
		"flag without stamp": {Flags: FlagStamped, Created: 1, FreshUntil: 1, StaleUntil: 1, ErrorUntil: 1},
		"stamp without flag": {Gen: 1, Created: 1, FreshUntil: 1, StaleUntil: 1, ErrorUntil: 1},
	} {
		if _, err := Encode(&h, nil); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	bad := slices.Clone(sb)
	bad[len(pb)+3] = '{' // the first tag's byte: gen (2), count, length, then the tag
	for name, b := range map[string][]byte{"bad tag byte": bad, "truncated": sb[:len(pb)+2]} {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestEnvelopeRejects(t *testing.T) {
	good := mustEncode(t, Header{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 3}, "")
	header := good[:headerSize]
	cases := map[string][]byte{
		"nil":         nil,
		"short":       good[:3],
		"truncated":   good[:len(good)-2],
		"json":        []byte(`{"a":1}`),
		"no created":  append(slices.Clone(header), 0, 1, 1, 0, 0),
		"non-minimal": append(slices.Clone(header), 0x81, 0x00, 1, 1, 0, 0),
		"too large":   append(slices.Clone(header), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 1, 0, 0),
		"overflow":    append(slices.Clone(header), 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0, 0),
		"future":      append([]byte{Magic, Version + 1}, good[2:]...),
		"old v2":      {0x9b, 0xcd, 0x53, 0x50, 0x02, 0x00},
		"flags":       append([]byte{Magic, Version, 0x80}, good[3:]...),
	}
	for name, b := range cases {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	for name, h := range map[string]Header{
		"fresh<create": {Created: 5, FreshUntil: 4, StaleUntil: 6, ErrorUntil: 6},
		"stale<fresh":  {Created: 1, FreshUntil: 4, StaleUntil: 3, ErrorUntil: 4},
		"error<stale":  {Created: 1, FreshUntil: 4, StaleUntil: 5, ErrorUntil: 4},
		"no created":   {Created: 0, FreshUntil: 4, StaleUntil: 5, ErrorUntil: 5},
	} {
		if _, err := Encode(&h, nil); err == nil {
			t.Errorf("%s: encoded without error", name)
		}
	}
}

func mustEncode(t *testing.T, h Header, value string) []byte {
	t.Helper()
	b, err := Encode(&h, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeEnvelope: whatever decodes is consistent, and it is the one
// encoding of its envelope (the decoder is strict: it re-encodes to the same
// bytes).
func FuzzDecodeEnvelope(f *testing.F) {
	good, _ := Encode(&Header{Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4}, []byte("v"))
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{Magic, Version, 0, 0, 0, 0, 0})
	stamped, _ := Encode(&Header{Flags: FlagStamped, Created: 1, FreshUntil: 2, StaleUntil: 3, ErrorUntil: 4, Gen: 300, Tags: []string{"a", "user:42"}}, []byte("v"))
	f.Add(stamped)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, v, err := Decode(b)
		if err != nil {
			return
		}
		if h.Created <= 0 || h.FreshUntil < h.Created || h.StaleUntil < h.FreshUntil || h.ErrorUntil < h.StaleUntil {
			t.Fatalf("accepted an inconsistent envelope %+v", h)
		}
		again, err := Encode(&h, v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoded envelope differs:\n%x\n%x", b, again)
		}
	})
}
