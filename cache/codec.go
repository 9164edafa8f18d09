package cache

import (
	"bytes"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Codec turns values into bytes for Redis and back. Implementations must be
// safe for concurrent use.
type Codec interface {
	// Marshal encodes v, a pointer to the value.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes data into v, a pointer to a value. It must neither
	// modify data nor keep a reference to it after returning: data may be a
	// read-only view of the Redis reply.
	Unmarshal(data []byte, v any) error
}

// MsgpackCodec encodes values with github.com/vmihailenco/msgpack/v5. It is
// the default codec. The zero value is ready to use.
type MsgpackCodec struct{}

// Marshal implements [Codec].
func (MsgpackCodec) Marshal(v any) ([]byte, error) { return msgpack.Marshal(v) }

// Unmarshal implements [Codec].
func (MsgpackCodec) Unmarshal(data []byte, v any) error { return msgpack.Unmarshal(data, v) }

var _ Codec = MsgpackCodec{}

// defaultCodec is MsgpackCodec, with []byte and string values kept as their
// raw bytes: no framing to add and none to parse on every hit.
type defaultCodec struct{ MsgpackCodec }

// Marshal implements [Codec].
func (d defaultCodec) Marshal(v any) ([]byte, error) {
	switch p := v.(type) {
	case *[]byte:
		return *p, nil
	case *string:
		return []byte(*p), nil
	}
	return d.MsgpackCodec.Marshal(v)
}

// Unmarshal implements [Codec].
func (d defaultCodec) Unmarshal(data []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = bytes.Clone(data)
		if *p == nil {
			*p = []byte{}
		}
		return nil
	case *string:
		*p = string(data)
		return nil
	}
	return d.MsgpackCodec.Unmarshal(data, v)
}

// decodeRaw is defaultCodec's Unmarshal for []byte and string values,
// without the interface call that would move the value to the heap. It
// reports false for other types. data must be a view of an immutable Go
// string (a Redis reply): a string value shares its bytes instead of
// copying them, which saves the hit path its one allocation for a string
// V (the reply's few header bytes stay alive with the value). A []byte
// value is the caller's to modify: it gets a copy.
func decodeRaw[V any](data []byte, v *V) bool {
	switch p := any(v).(type) {
	case *[]byte:
		// make and copy into a local, a pair the compiler turns into one
		// allocation of exactly len(data) that is not zeroed first
		// (bytes.Clone appends; make into *p is zeroed, then copied);
		// never nil.
		b := make([]byte, len(data))
		copy(b, data)
		*p = b
		return true
	case *string:
		*p = unsafe.String(unsafe.SliceData(data), len(data))
		return true
	}
	return false
}
