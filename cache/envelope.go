package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The envelope is what the cache stores under {ns:k}:v: a msgpack array of
//
//	[magic uint16 "SP", version uint8, flags uint8, type uint32, created,
//	 freshUntil, staleUntil, errorUntil (unix ms), computeMicros,
//	 fence (int64), value (bin)]
//
// type is a fingerprint of the value's Go type and codec, so that a cache of
// another type on the same keys reads the entry as foreign, never as a value.
//
// It is written and read by hand (any msgpack reader can read it): the hit
// path decodes it on every call, and a reflective decoder cost more than the
// rest of the hit path put together.
const (
	envelopeMagic   = 0x5350 // "SP"
	envelopeVersion = 2
	envelopeFields  = 11
)

type envelope struct {
	Flags         uint8
	Type          uint32 // fingerprint of the value's type and codec
	Created       int64  // unix milliseconds
	FreshUntil    int64  // unix milliseconds
	StaleUntil    int64  // unix milliseconds
	ErrorUntil    int64  // unix milliseconds: kept until then for stale-if-error
	ComputeMicros int64  // how long the compute function took
	Fence         int64  // the fence the writer held (0 for Set)
	Value         []byte
}

var errCorrupt = errors.New("cache: corrupt or foreign entry")

func encodeEnvelope(e *envelope) ([]byte, error) {
	n := len(e.Value)
	if uint64(n) > 1<<32-1 {
		return nil, fmt.Errorf("%w: envelope: value of %d bytes", ErrCodec, n)
	}
	b := make([]byte, 0, fixedValAt+n)
	b = append(b, 0x90|envelopeFields)
	b = append(b, 0xcd, envelopeMagic>>8, envelopeMagic&0xff)
	b = append(b, envelopeVersion, e.Flags&0x7f)
	b = append(b, 0xce)
	b = binary.BigEndian.AppendUint32(b, e.Type)
	for _, v := range [...]int64{e.Created, e.FreshUntil, e.StaleUntil, e.ErrorUntil, e.ComputeMicros, e.Fence} {
		b = append(b, 0xd3)
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = append(b, 0xc6)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return append(b, e.Value...), nil
}

// decodeEnvelope parses and checks an envelope. Anything that is not one of
// ours (garbage, a foreign value, a future version) is errCorrupt. The
// returned Value aliases b.
func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	if len(b) < 4 || b[0] != 0x90|envelopeFields || b[1] != 0xcd || b[2] != envelopeMagic>>8 || b[3] != envelopeMagic&0xff {
		return e, errCorrupt
	}
	if e, ok := decodeFixed(b); ok {
		return e, e.check()
	}
	r := reader{b: b[4:]}
	version := r.int()
	flags := r.int()
	typ := r.int()
	e.Created = r.int()
	e.FreshUntil = r.int()
	e.StaleUntil = r.int()
	e.ErrorUntil = r.int()
	e.ComputeMicros = r.int()
	e.Fence = r.int()
	e.Value = r.bin()
	switch {
	case r.err != nil:
		return envelope{}, r.err
	case len(r.b) != 0:
		return envelope{}, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(r.b))
	case version != envelopeVersion:
		return envelope{}, fmt.Errorf("%w: version %d", errCorrupt, version)
	case flags < 0 || flags > 0x7f:
		return envelope{}, fmt.Errorf("%w: flags %d", errCorrupt, flags)
	case typ < 0 || typ > 1<<32-1:
		return envelope{}, fmt.Errorf("%w: type %d", errCorrupt, typ)
	case e.Created <= 0 || e.FreshUntil < e.Created || e.StaleUntil < e.FreshUntil || e.ErrorUntil < e.StaleUntil || e.ComputeMicros < 0 || e.Fence < 0:
		return envelope{}, fmt.Errorf("%w: inconsistent times", errCorrupt)
	}
	e.Flags = uint8(flags)
	e.Type = uint32(typ)
	return e, nil
}

// Offsets of the fixed-width layout that encodeEnvelope writes.
const (
	fixedTypeAt = 6
	fixedInts   = 6
	fixedIntsAt = fixedTypeAt + 5
	fixedBinAt  = fixedIntsAt + 9*fixedInts
	fixedValAt  = fixedBinAt + 5
)

// decodeFixed reads the exact layout encodeEnvelope writes (every integer
// as int64, the value as bin32) by offset; ok is false for any other
// encoding, which the general reader then handles.
func decodeFixed(b []byte) (e envelope, ok bool) {
	if len(b) < fixedValAt || b[4] != envelopeVersion || b[5] > 0x7f || b[fixedTypeAt] != 0xce || b[fixedBinAt] != 0xc6 {
		return e, false
	}
	var ints [fixedInts]int64
	for i := range ints {
		at := fixedIntsAt + 9*i
		if b[at] != 0xd3 {
			return e, false
		}
		ints[i] = int64(binary.BigEndian.Uint64(b[at+1 : at+9]))
	}
	if n := binary.BigEndian.Uint32(b[fixedBinAt+1 : fixedValAt]); uint64(n) != uint64(len(b)-fixedValAt) {
		return e, false
	}
	e.Flags = b[5]
	e.Type = binary.BigEndian.Uint32(b[fixedTypeAt+1 : fixedIntsAt])
	e.Created, e.FreshUntil, e.StaleUntil, e.ErrorUntil, e.ComputeMicros, e.Fence = ints[0], ints[1], ints[2], ints[3], ints[4], ints[5]
	e.Value = b[fixedValAt:]
	return e, true
}

// check validates an envelope's times.
func (e envelope) check() error {
	if e.Created <= 0 || e.FreshUntil < e.Created || e.StaleUntil < e.FreshUntil || e.ErrorUntil < e.StaleUntil || e.ComputeMicros < 0 || e.Fence < 0 {
		return fmt.Errorf("%w: inconsistent times", errCorrupt)
	}
	return nil
}

// reader reads msgpack integers and binary strings; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = fmt.Errorf("%w: truncated", errCorrupt)
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) int() int64 {
	p := r.take(1)
	if p == nil {
		return 0
	}
	switch c := p[0]; {
	case c <= 0x7f:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c == 0xcc:
		if q := r.take(1); q != nil {
			return int64(q[0])
		}
	case c == 0xcd:
		if q := r.take(2); q != nil {
			return int64(binary.BigEndian.Uint16(q))
		}
	case c == 0xce:
		if q := r.take(4); q != nil {
			return int64(binary.BigEndian.Uint32(q))
		}
	case c == 0xcf:
		if q := r.take(8); q != nil {
			u := binary.BigEndian.Uint64(q)
			if u > 1<<63-1 {
				r.err = fmt.Errorf("%w: integer overflow", errCorrupt)
				return 0
			}
			return int64(u)
		}
	case c == 0xd0:
		if q := r.take(1); q != nil {
			return int64(int8(q[0]))
		}
	case c == 0xd1:
		if q := r.take(2); q != nil {
			return int64(int16(binary.BigEndian.Uint16(q)))
		}
	case c == 0xd2:
		if q := r.take(4); q != nil {
			return int64(int32(binary.BigEndian.Uint32(q)))
		}
	case c == 0xd3:
		if q := r.take(8); q != nil {
			return int64(binary.BigEndian.Uint64(q))
		}
	default:
		r.err = fmt.Errorf("%w: expected an integer, got 0x%02x", errCorrupt, c)
	}
	return 0
}

func (r *reader) bin() []byte {
	p := r.take(1)
	if p == nil {
		return nil
	}
	var n int
	switch p[0] {
	case 0xc4:
		if q := r.take(1); q != nil {
			n = int(q[0])
		}
	case 0xc5:
		if q := r.take(2); q != nil {
			n = int(binary.BigEndian.Uint16(q))
		}
	case 0xc6:
		if q := r.take(4); q != nil {
			n = int(binary.BigEndian.Uint32(q))
		}
	default:
		r.err = fmt.Errorf("%w: expected binary, got 0x%02x", errCorrupt, p[0])
		return nil
	}
	return r.take(n)
}

func toMillis(t time.Time) int64 { return t.UnixMilli() }

// fromMillis returns a UTC time: no location pointer to copy around.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
