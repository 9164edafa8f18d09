package cache

import "github.com/vmihailenco/msgpack/v5"

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
