// Package envelope is the wire format of a cached entry: the bytes stored
// under {ns:k}:v and carried by a fill's or Set's announcement on {ns:k}:n.
// It speaks bytes and a Header (windows, flags, type fingerprint, stamp);
// the value is opaque bytes, decoded into V by the cache's Codec above it.
//
// The layout:
//
//	0xc1, version, flags, type (uint32, big-endian),
//	created (unix ms), fresh, stale, error (ms), compute (µs): uvarints,
//	[stamp: generation, tag count, then each tag's length and bytes: uvarints
//	and bytes, present only with FlagStamped]
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
// The stamp is what the invalidation checks read (see cache/internal/marks):
// the namespace's invalidation counter when the value's compute began, and
// the tags the compute attached. An entry of generation 0 without tags (a
// namespace never invalidated) carries none, and costs nothing.
//
// The decoder is strict: one encoding per envelope (minimal uvarints), so
// that whatever decodes re-encodes to the same bytes.
package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

const (
	// Magic is an envelope's first byte.
	Magic = 0xc1
	// Version is the layout's version, its second byte.
	Version    = 3
	headerSize = 7 // magic, version, flags, type
	// MaxTime bounds every time and window, so sums cannot overflow.
	MaxTime = 1 << 53
	// MaxTags bounds the tags of one entry.
	MaxTags = 32
	// MaxTagBytes bounds one tag.
	MaxTagBytes = 128
)

// Header flags.
const (
	// FlagNegative marks a cached "not found": the value is empty.
	FlagNegative = 1 << iota
	// FlagFailSafe marks a previous value re-armed by the fail-safe.
	FlagFailSafe
	// FlagStamped says the envelope carries a stamp (generation and tags).
	FlagStamped
)

// Header is everything an envelope says besides the value's bytes.
type Header struct {
	Flags         uint8
	Type          uint32   // fingerprint of the value's type and codec
	Created       int64    // unix milliseconds
	FreshUntil    int64    // unix milliseconds
	StaleUntil    int64    // unix milliseconds
	ErrorUntil    int64    // unix milliseconds: kept until then for stale-if-error
	ComputeMicros int64    // how long the compute function took
	Gen           uint64   // the namespace's invalidation counter when the compute began
	Tags          []string // the value's tags
}

// ErrCorrupt means bytes that are not an envelope of this version:
// garbage, a foreign value, another version, or inconsistent times.
var ErrCorrupt = errors.New("cache: corrupt or foreign entry")

// Encode returns the envelope of h and value (copied), or ErrCorrupt when
// h is inconsistent.
func Encode(h *Header, value []byte) ([]byte, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	size := headerSize + 5*binary.MaxVarintLen64 + len(value)
	if h.Flags&FlagStamped != 0 {
		size += 2 * binary.MaxVarintLen64
		for _, t := range h.Tags {
			size += binary.MaxVarintLen64 + len(t)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, Magic, Version, h.Flags)
	b = binary.BigEndian.AppendUint32(b, h.Type)
	for _, v := range [...]int64{h.Created, h.FreshUntil - h.Created, h.StaleUntil - h.FreshUntil, h.ErrorUntil - h.StaleUntil, h.ComputeMicros} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	if h.Flags&FlagStamped != 0 {
		b = binary.AppendUvarint(b, h.Gen)
		b = binary.AppendUvarint(b, uint64(len(h.Tags)))
		for _, t := range h.Tags {
			b = binary.AppendUvarint(b, uint64(len(t)))
			b = append(b, t...)
		}
	}
	return append(b, value...), nil
}

// Decode parses and checks an envelope. Anything that is not one of ours
// (garbage, a foreign value, another version) is ErrCorrupt. The returned
// value aliases b; Decode neither modifies b nor keeps it.
func Decode(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < headerSize || b[0] != Magic {
		return h, nil, ErrCorrupt
	}
	if b[1] != Version {
		return h, nil, fmt.Errorf("%w: version %d", ErrCorrupt, b[1])
	}
	if b[2] > 0x7f {
		return h, nil, fmt.Errorf("%w: flags %d", ErrCorrupt, b[2])
	}
	h.Flags = b[2]
	h.Type = binary.BigEndian.Uint32(b[3:headerSize])
	at := headerSize
	var n [5]int64
	for i := range n {
		v, size := binary.Uvarint(b[at:])
		switch {
		case size <= 0:
			return Header{}, nil, fmt.Errorf("%w: truncated", ErrCorrupt)
		case size > 1 && b[at+size-1] == 0:
			return Header{}, nil, fmt.Errorf("%w: non-minimal integer", ErrCorrupt)
		case v > MaxTime:
			return Header{}, nil, fmt.Errorf("%w: integer out of range", ErrCorrupt)
		}
		n[i] = int64(v)
		at += size
	}
	h.Created = n[0]
	h.FreshUntil = h.Created + n[1]
	h.StaleUntil = h.FreshUntil + n[2]
	h.ErrorUntil = h.StaleUntil + n[3]
	h.ComputeMicros = n[4]
	if h.Flags&FlagStamped != 0 {
		size, err := h.decodeStamp(b[at:])
		if err != nil {
			return Header{}, nil, err
		}
		at += size
	}
	return h, b[at:], h.check()
}

// decodeStamp parses the stamp at the start of b into h and returns its
// size.
func (h *Header) decodeStamp(b []byte) (int, error) {
	at := 0
	next := func(limit uint64) (uint64, error) {
		v, size := binary.Uvarint(b[at:])
		switch {
		case size <= 0:
			return 0, fmt.Errorf("%w: truncated stamp", ErrCorrupt)
		case size > 1 && b[at+size-1] == 0:
			return 0, fmt.Errorf("%w: non-minimal integer", ErrCorrupt)
		case v > limit:
			return 0, fmt.Errorf("%w: stamp out of range", ErrCorrupt)
		}
		at += size
		return v, nil
	}
	gen, err := next(MaxTime)
	if err != nil {
		return 0, err
	}
	n, err := next(MaxTags)
	if err != nil {
		return 0, err
	}
	if gen == 0 && n == 0 {
		return 0, fmt.Errorf("%w: empty stamp", ErrCorrupt)
	}
	h.Gen = gen
	if n > 0 {
		h.Tags = make([]string, n)
	}
	for i := range h.Tags {
		size, err := next(MaxTagBytes)
		if err != nil {
			return 0, err
		}
		if uint64(len(b)-at) < size {
			return 0, fmt.Errorf("%w: truncated tag", ErrCorrupt)
		}
		h.Tags[i] = string(b[at : at+int(size)])
		if !ValidTag(h.Tags[i]) {
			return 0, fmt.Errorf("%w: bad tag", ErrCorrupt)
		}
		at += int(size)
	}
	return at, nil
}

// check validates a header's times, flags and stamp.
func (h *Header) check() error {
	if h.Created <= 0 || h.FreshUntil < h.Created || h.StaleUntil < h.FreshUntil || h.ErrorUntil < h.StaleUntil ||
		h.ErrorUntil > MaxTime || h.ComputeMicros < 0 || h.ComputeMicros > MaxTime || h.Flags > 0x7f ||
		h.Flags&FlagStamped == 0 && (h.Gen != 0 || len(h.Tags) > 0) || h.Flags&FlagStamped != 0 && h.Gen == 0 && len(h.Tags) == 0 {
		return fmt.Errorf("%w: inconsistent times", ErrCorrupt)
	}
	return nil
}

// ValidTag reports whether t may be a tag in a stamp: 1 to MaxTagBytes
// bytes, each a TagByte.
func ValidTag(t string) bool {
	if t == "" || len(t) > MaxTagBytes {
		return false
	}
	for i := 0; i < len(t); i++ {
		if !TagByte(t[i]) {
			return false
		}
	}
	return true
}

// TagByte reports whether b may appear in a tag: an ASCII letter or digit,
// one of '_', '-', '.', '/' (the namespace alphabet), or ':'.
func TagByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '_' || b == '-' || b == '.' || b == '/' || b == ':'
}

// Value returns the value part of s when s is an envelope that decodes (a
// substring of it, no copy), or "" for anything else.
func Value(s string) string {
	_, v, err := Decode(unsafe.Slice(unsafe.StringData(s), len(s)))
	if err != nil {
		return ""
	}
	return s[len(s)-len(v):]
}

// Is reports whether an announcement's payload is an envelope (a fill or
// Set that carried its value) rather than a marker.
func Is(payload string) bool { return len(payload) > 0 && payload[0] == Magic }
