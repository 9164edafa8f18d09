package cache

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// S2Codec wraps a [Codec] and compresses what it encodes with S2
// (github.com/klauspost/compress/s2) when that is at least MinBytes long and
// compression makes it smaller: Redis memory, network bytes and the share
// of values that fit in a fill notification (64 KiB) all shrink by the
// compression ratio, for some CPU on every fill and every hit that reads
// Redis (see BENCHMARKS.md for the measured sizes and costs). Values
// shorter than MinBytes are stored as they are, behind one byte.
//
// A cache that switches to or from S2Codec reads the other's entries as
// foreign (a miss), never as garbage: the codec is part of every entry's
// type fingerprint.
//
// The zero value compresses [MsgpackCodec]'s output from 1 KiB on. It is
// safe for concurrent use.
type S2Codec struct {
	// Codec encodes the values before compression. Default: MsgpackCodec.
	Codec Codec
	// MinBytes is the shortest encoded value that is compressed. Default:
	// 1024 (0 means the default).
	MinBytes int
}

const (
	s2Stored     = 0 // the inner codec's bytes as they are
	s2Compressed = 1 // S2 block of the inner codec's bytes

	s2DefaultMin = 1024
	// s2MaxDecoded bounds what a corrupt or hostile entry can make Unmarshal
	// allocate.
	s2MaxDecoded = 1 << 30
)

var errS2Frame = errors.New("cache: S2Codec: corrupt frame")

func (c S2Codec) inner() Codec {
	if c.Codec == nil {
		return MsgpackCodec{}
	}
	return c.Codec
}

// Marshal implements [Codec].
func (c S2Codec) Marshal(v any) ([]byte, error) {
	b, err := c.inner().Marshal(v)
	if err != nil {
		return nil, err
	}
	minBytes := c.MinBytes
	if minBytes <= 0 {
		minBytes = s2DefaultMin
	}
	if len(b) >= minBytes {
		out := make([]byte, 1+s2.MaxEncodedLen(len(b)))
		out[0] = s2Compressed
		if n := len(s2.Encode(out[1:], b)); n < len(b) {
			return out[:1+n], nil
		}
	}
	out := make([]byte, 1+len(b))
	out[0] = s2Stored
	copy(out[1:], b)
	return out, nil
}

// Unmarshal implements [Codec].
func (c S2Codec) Unmarshal(data []byte, v any) error {
	if len(data) == 0 {
		return errS2Frame
	}
	switch data[0] {
	case s2Stored:
		return c.inner().Unmarshal(data[1:], v)
	case s2Compressed:
		n, err := s2.DecodedLen(data[1:])
		if err != nil {
			return fmt.Errorf("%w: %w", errS2Frame, err)
		}
		if n > s2MaxDecoded {
			return fmt.Errorf("%w: %d bytes decoded, limit %d", errS2Frame, n, s2MaxDecoded)
		}
		b, err := s2.Decode(make([]byte, n), data[1:])
		if err != nil {
			return fmt.Errorf("%w: %w", errS2Frame, err)
		}
		return c.inner().Unmarshal(b, v)
	}
	return fmt.Errorf("%w: kind %d", errS2Frame, data[0])
}

var _ Codec = S2Codec{}
