package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// The envelope is what the cache stores under {ns:k}:v, and what a fill
// notification carries to the waiters of another replica:
//
//	0xc1, version, flags, type (uint32, big-endian),
//	created (unix ms), fresh, stale, error (ms), compute (µs): uvarints,
//	value (the rest)
//
// fresh is FreshUntil-Created, stale is StaleUntil-FreshUntil and error is
// ErrorUntil-StaleUntil: small numbers for small integers. A 100-byte value
// with a one-hour TTL costs about 20 bytes of envelope, which keeps it in the
// same allocator size class as the bare value would be in most cases (see
// BENCHMARKS.md's memory figures). 0xc1 is the one byte msgpack never uses,
// so no msgpack, JSON or text value starts with it.
//
// type is a fingerprint of the value's Go type and codec, so that a cache of
// another type on the same keys reads the entry as foreign, never as a value.
//
// The decoder is strict: one encoding per envelope (minimal uvarints), so
// that whatever decodes re-encodes to the same bytes.
const (
	envelopeMagic   = 0xc1
	envelopeVersion = 3
	envelopeHeader  = 7 // magic, version, flags, type
	// maxTime bounds every time and window, so sums cannot overflow.
	maxTime = 1 << 53
)

type envelope struct {
	Flags         uint8
	Type          uint32 // fingerprint of the value's type and codec
	Created       int64  // unix milliseconds
	FreshUntil    int64  // unix milliseconds
	StaleUntil    int64  // unix milliseconds
	ErrorUntil    int64  // unix milliseconds: kept until then for stale-if-error
	ComputeMicros int64  // how long the compute function took
	Value         []byte
}

var errCorrupt = errors.New("cache: corrupt or foreign entry")

func encodeEnvelope(e *envelope) ([]byte, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, envelopeHeader+5*binary.MaxVarintLen64+len(e.Value))
	b = append(b, envelopeMagic, envelopeVersion, e.Flags)
	b = binary.BigEndian.AppendUint32(b, e.Type)
	for _, v := range [...]int64{e.Created, e.FreshUntil - e.Created, e.StaleUntil - e.FreshUntil, e.ErrorUntil - e.StaleUntil, e.ComputeMicros} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return append(b, e.Value...), nil
}

// decodeEnvelope parses and checks an envelope. Anything that is not one of
// ours (garbage, a foreign value, another version) is errCorrupt. The
// returned Value aliases b.
func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	if len(b) < envelopeHeader || b[0] != envelopeMagic {
		return e, errCorrupt
	}
	if b[1] != envelopeVersion {
		return e, fmt.Errorf("%w: version %d", errCorrupt, b[1])
	}
	if b[2] > 0x7f {
		return e, fmt.Errorf("%w: flags %d", errCorrupt, b[2])
	}
	e.Flags = b[2]
	e.Type = binary.BigEndian.Uint32(b[3:envelopeHeader])
	at := envelopeHeader
	var n [5]int64
	for i := range n {
		v, size := binary.Uvarint(b[at:])
		switch {
		case size <= 0:
			return envelope{}, fmt.Errorf("%w: truncated", errCorrupt)
		case size > 1 && b[at+size-1] == 0:
			return envelope{}, fmt.Errorf("%w: non-minimal integer", errCorrupt)
		case v > maxTime:
			return envelope{}, fmt.Errorf("%w: integer out of range", errCorrupt)
		}
		n[i] = int64(v)
		at += size
	}
	e.Created = n[0]
	e.FreshUntil = e.Created + n[1]
	e.StaleUntil = e.FreshUntil + n[2]
	e.ErrorUntil = e.StaleUntil + n[3]
	e.ComputeMicros = n[4]
	e.Value = b[at:]
	return e, e.check()
}

// check validates an envelope's times.
func (e envelope) check() error {
	if e.Created <= 0 || e.FreshUntil < e.Created || e.StaleUntil < e.FreshUntil || e.ErrorUntil < e.StaleUntil ||
		e.ErrorUntil > maxTime || e.ComputeMicros < 0 || e.ComputeMicros > maxTime || e.Flags > 0x7f {
		return fmt.Errorf("%w: inconsistent times", errCorrupt)
	}
	return nil
}

// envelopeValue returns the value part of an envelope that decodes (a
// substring of it, no copy), or "" for anything else.
func envelopeValue(s string) string {
	env, err := decodeEnvelope(unsafe.Slice(unsafe.StringData(s), len(s)))
	if err != nil {
		return ""
	}
	return s[len(s)-len(env.Value):]
}

// isEnvelope reports whether a notification's payload is an envelope (a
// fill or Set that carried its value) rather than a marker.
func isEnvelope(payload string) bool { return len(payload) > 0 && payload[0] == envelopeMagic }

func toMillis(t time.Time) int64 { return t.UnixMilli() }

// fromMillis returns a UTC time: no location pointer to copy around.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
