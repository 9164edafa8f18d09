package cache

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"reflect"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/stale"
)

// Envelope flags.
const (
	flagNegative = 1 << iota
	flagFailSafe
)

// typeFingerprint identifies V and the codec in every envelope: a cache of
// another value type (or codec) reading the same key sees a foreign entry.
func typeFingerprint[V any](codec Codec) uint32 {
	t := reflect.TypeFor[V]()
	h := fnv.New32a()
	fmt.Fprintf(h, "%s|%s|%T", t.PkgPath(), t.String(), codec)
	return h.Sum32()
}

// checkCodec encodes V's zero value, so that a type the codec cannot encode
// (a chan or func field, say) fails New instead of every fill.
func checkCodec[V any](codec Codec) error {
	var v V
	if _, err := codec.Marshal(&v); err != nil {
		return fmt.Errorf("%w: the codec cannot encode %s: %w", ErrInvalidOptions, reflect.TypeFor[V](), err)
	}
	return nil
}

// encodeEntry turns an entry into an envelope for Redis.
func (c *Cache[V]) encodeEntry(e entry[V]) ([]byte, error) { return c.encodeEntryRaw(e, "") }

// encodeEntryRaw is encodeEntry with e.value already encoded as raw, when
// raw is not empty: a previous value re-armed keeps the bytes it was stored
// with, and the codec is not called.
func (c *Cache[V]) encodeEntryRaw(e entry[V], raw string) ([]byte, error) {
	env := envelope{
		Type:          c.typeTag,
		Created:       toMillis(e.w.Created),
		FreshUntil:    toMillis(e.w.FreshUntil),
		StaleUntil:    toMillis(e.w.StaleUntil),
		ErrorUntil:    toMillis(e.w.ErrorUntil),
		ComputeMicros: e.took.Microseconds(),
	}
	if e.failSafe {
		env.Flags |= flagFailSafe
	}
	switch {
	case e.negative:
		env.Flags |= flagNegative
	case raw != "":
		// A read-only view: encodeEnvelope copies it into the envelope.
		env.Value = unsafe.Slice(unsafe.StringData(raw), len(raw))
	default:
		b, err := c.opts.Codec.Marshal(&e.value)
		if err != nil {
			return nil, fmt.Errorf("%w: encode: %w", ErrCodec, err)
		}
		env.Value = b
	}
	if len(env.Value) > c.opts.MaxValueBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d (Options.MaxValueBytes)", ErrValueTooLarge, len(env.Value), c.opts.MaxValueBytes)
	}
	return encodeEnvelope(&env)
}

// decodeEntry turns a GET's reply into an entry; a corrupt or foreign one
// is not found, and counted when count is set (re-reads of an entry already
// counted do not count it again).
func (c *Cache[V]) decodeEntry(ctx context.Context, key string, r reply, count bool) (e entry[V], found bool, err error) {
	if !r.found {
		return e, false, nil
	}
	s := r.s
	// A read-only view of the reply, saving a copy per hit: the envelope
	// decoder and Codec.Unmarshal must not modify data or keep it.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	env, err := decodeEnvelope(b)
	if err == nil && env.Type != c.typeTag {
		err = fmt.Errorf("%w: written by a cache of another value type or codec", errCorrupt)
	}
	if err == nil && env.Flags&flagNegative == 0 {
		if _, raw := c.opts.Codec.(defaultCodec); !raw || !decodeRaw(env.Value, &e.value) {
			var v V // decoded apart from e, so only V escapes to the heap
			err = c.opts.Codec.Unmarshal(env.Value, &v)
			e.value = v
		}
	}
	if err != nil {
		if count {
			c.stats.corrupt.Add(1)
			c.observe(ctx, Event{Kind: EventCorrupt, Key: key, Err: err})
			c.logRare(ctx, slog.LevelWarn, "stampede: corrupt or foreign entry treated as a miss", key, err)
		}
		return entry[V]{}, false, nil
	}
	e.w = stale.Windows{
		Created:    fromMillis(env.Created),
		FreshUntil: fromMillis(env.FreshUntil),
		StaleUntil: fromMillis(env.StaleUntil),
		ErrorUntil: fromMillis(env.ErrorUntil),
	}
	e.took = time.Duration(env.ComputeMicros) * time.Microsecond
	e.negative = env.Flags&flagNegative != 0
	e.failSafe = env.Flags&flagFailSafe != 0
	if c.l1 != nil {
		e.stamp = c.l1.stamp(s)
	}
	return e, true, nil
}
