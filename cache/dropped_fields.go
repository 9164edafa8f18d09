package cache

import (
	"encoding"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// usesMsgpack reports whether codec is the default codec or MsgpackCodec,
// whose rules droppedField knows. A custom codec is its author's
// responsibility.
func usesMsgpack(codec Codec) bool {
	switch codec.(type) {
	case defaultCodec, MsgpackCodec, *MsgpackCodec:
		return true
	}
	return false
}

// checkDroppedFields refuses a V with a field the default codec would drop
// on the way through Redis (an unexported field, at any depth), so that a
// value read from Redis is the value L1, the process-local store and the
// computing caller hold. A field tagged `msgpack:"-"` is an intended drop;
// [Options.AllowDroppedFields] allows the rest.
func checkDroppedFields[V any](opts Options) error {
	if opts.AllowDroppedFields || !usesMsgpack(opts.Codec) {
		return nil
	}
	t := reflect.TypeFor[V]()
	if t == reflect.TypeFor[[]byte]() || t == reflect.TypeFor[string]() {
		return nil // stored as raw bytes
	}
	if path := droppedField(t, t.String(), map[reflect.Type]bool{}); path != "" {
		return fmt.Errorf("%w: %s has field %s, which the codec does not encode: a value read back from Redis would lack it "+
			"(export it, tag it `msgpack:\"-\"`, or set Options.AllowDroppedFields)", ErrInvalidOptions, t, path)
	}
	return nil
}

var (
	customEncoder   = reflect.TypeFor[msgpack.CustomEncoder]()
	msgpackMarshal  = reflect.TypeFor[msgpack.Marshaler]()
	binaryMarshaler = reflect.TypeFor[encoding.BinaryMarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
)

// encodesItself reports whether msgpack encodes t through t's own method
// (or built-in support, like time.Time) rather than field by field.
func encodesItself(t reflect.Type) bool {
	if t == reflect.TypeFor[time.Time]() {
		return true
	}
	for _, i := range []reflect.Type{customEncoder, msgpackMarshal, binaryMarshaler, textMarshaler} {
		if t.Implements(i) || reflect.PointerTo(t).Implements(i) {
			return true
		}
	}
	return false
}

// droppedField returns the path (rooted at path) of the first field of t
// msgpack would not encode, or "".
func droppedField(t reflect.Type, path string, seen map[reflect.Type]bool) string {
	if seen[t] || encodesItself(t) {
		return ""
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return droppedField(t.Elem(), path+"[]", seen)
	case reflect.Map:
		if p := droppedField(t.Key(), path+"{key}", seen); p != "" {
			return p
		}
		return droppedField(t.Elem(), path+"{}", seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			if tag == "-" || f.Type.Size() == 0 {
				continue // dropped on purpose, or nothing to drop
			}
			if !f.IsExported() && !f.Anonymous {
				return path + "." + f.Name
			}
			if p := droppedField(f.Type, path+"."+f.Name, seen); p != "" {
				return p
			}
		}
	}
	return ""
}
