package cache

import (
	"errors"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

const (
	envelopeMagic   = 0x5350 // "SP"
	envelopeVersion = 1
)

// envelope is what the cache stores under {ns:k}:v: the encoded value and
// the times that decide its freshness, as a msgpack array.
type envelope struct {
	_msgpack      struct{} `msgpack:",as_array"`
	Magic         uint16
	Version       uint8
	Flags         uint8
	Created       int64 // unix milliseconds
	FreshUntil    int64 // unix milliseconds
	StaleUntil    int64 // unix milliseconds
	ComputeMicros int64 // how long the compute function took
	Fence         int64 // the fence the writer held
	Value         []byte
}

var errCorrupt = errors.New("cache: corrupt or foreign entry")

func encodeEnvelope(e *envelope) ([]byte, error) {
	e.Magic, e.Version = envelopeMagic, envelopeVersion
	b, err := msgpack.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: envelope: %w", ErrCodec, err)
	}
	return b, nil
}

// decodeEnvelope parses and checks an envelope. Anything that is not one of
// ours (garbage, a foreign value, a future version) is errCorrupt.
func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	// A msgpack fixarray of 9 elements followed by the magic as uint16.
	if len(b) < 4 || b[0] != 0x99 || b[1] != 0xcd || b[2] != envelopeMagic>>8 || b[3] != envelopeMagic&0xff {
		return e, errCorrupt
	}
	if err := msgpack.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	switch {
	case e.Magic != envelopeMagic || e.Version != envelopeVersion:
		return e, errCorrupt
	case e.Created <= 0 || e.FreshUntil < e.Created || e.StaleUntil < e.FreshUntil || e.ComputeMicros < 0 || e.Fence < 0:
		return e, fmt.Errorf("%w: inconsistent times", errCorrupt)
	}
	return e, nil
}

func toMillis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms) }
