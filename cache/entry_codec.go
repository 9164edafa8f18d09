package cache

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"reflect"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/cache/internal/envelope"
	"github.com/stampede-go/stampede/cache/internal/marks"
	"github.com/stampede-go/stampede/stale"
)

// An entry is stored in Redis as an envelope (see internal/envelope for its
// bytes): a header with its windows, flags, type fingerprint and stamp, and
// the value as the Codec encoded it. This file turns an entry[V] into an
// envelope and back; the Codec's half of that, V, stays here.

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
	var value []byte
	h := envelope.Header{
		Type:          c.typeTag,
		Created:       toMillis(e.w.Created),
		FreshUntil:    toMillis(e.w.FreshUntil),
		StaleUntil:    toMillis(e.w.StaleUntil),
		ErrorUntil:    toMillis(e.w.ErrorUntil),
		ComputeMicros: e.took.Microseconds(),
		Gen:           e.stamp.Gen,
		Tags:          e.stamp.Tags,
	}
	if e.stamp.Gen != 0 || len(e.stamp.Tags) > 0 {
		h.Flags |= envelope.FlagStamped
	}
	if e.failSafe {
		h.Flags |= envelope.FlagFailSafe
	}
	switch {
	case e.negative:
		h.Flags |= envelope.FlagNegative
	case raw != "":
		// A read-only view: envelope.Encode copies it into the envelope.
		value = unsafe.Slice(unsafe.StringData(raw), len(raw))
	default:
		b, err := c.opts.Codec.Marshal(&e.value)
		if err != nil {
			return nil, fmt.Errorf("%w: encode: %w", ErrCodec, err)
		}
		value = b
	}
	if len(value) > c.opts.MaxValueBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d (Options.MaxValueBytes)", ErrValueTooLarge, len(value), c.opts.MaxValueBytes)
	}
	return envelope.Encode(&h, value)
}

// decodeEntry turns a GET's reply into an entry; a corrupt or foreign one
// is not found, and counted when count is set (re-reads of an entry already
// counted do not count it again).
func (c *Cache[V]) decodeEntry(ctx context.Context, key string, r reply, count bool) (e entry[V], found bool, err error) {
	if !r.Found {
		return e, false, nil
	}
	raw, err := c.decodeHeader(r.Envelope, &e)
	if err == nil {
		err = c.decodeValue(raw, &e)
	}
	if err != nil {
		if count {
			c.corrupt(ctx, key, err)
		}
		return entry[V]{}, false, nil
	}
	return e, true, nil
}

// decodeHeader decodes everything of envelope s into e but the value, and
// returns the value's encoding (a slice of s, which must not be modified
// or kept beyond s).
func (c *Cache[V]) decodeHeader(s string, e *entry[V]) ([]byte, error) {
	// A read-only view of the reply, saving a copy per hit: the envelope
	// decoder and Codec.Unmarshal must not modify data or keep it.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	h, value, err := envelope.Decode(b)
	if err == nil && h.Type != c.typeTag {
		err = fmt.Errorf("%w: written by a cache of another value type or codec", envelope.ErrCorrupt)
	}
	if err != nil {
		return nil, err
	}
	e.w = stale.Windows{
		Created:    fromMillis(h.Created),
		FreshUntil: fromMillis(h.FreshUntil),
		StaleUntil: fromMillis(h.StaleUntil),
		ErrorUntil: fromMillis(h.ErrorUntil),
	}
	e.took = time.Duration(h.ComputeMicros) * time.Microsecond
	e.negative = h.Flags&envelope.FlagNegative != 0
	e.failSafe = h.Flags&envelope.FlagFailSafe != 0
	e.stamp = marks.Stamp{Gen: h.Gen, Tags: h.Tags}
	if c.l1 != nil {
		e.digest, e.size = c.l1.digest(s), len(s)
	}
	return value, nil
}

// decodeValue decodes e's value from raw (decodeHeader's), unless e is a
// cached "not found", which has none.
func (c *Cache[V]) decodeValue(raw []byte, e *entry[V]) error {
	v, err := c.decodeValueOf(raw, e.negative)
	e.value = v
	return err
}

// decodeValueOf is the value decoded from raw (decodeHeader's); none for a
// cached "not found" (negative).
func (c *Cache[V]) decodeValueOf(raw []byte, negative bool) (v V, err error) {
	if negative {
		return v, nil
	}
	if _, ok := c.opts.Codec.(defaultCodec); ok && decodeRaw(raw, &v) {
		return v, nil
	}
	var u V // decoded apart from v, so only u escapes to the heap
	err = c.opts.Codec.Unmarshal(raw, &u)
	return u, err
}

// decodeInto decodes envelope s into e, for key, and reports whether it
// decoded; one that does not is counted as corrupt, and e is left zero.
func (c *Cache[V]) decodeInto(ctx context.Context, key string, s string, e *entry[V]) bool {
	raw, err := c.decodeHeader(s, e)
	if err == nil {
		err = c.decodeValue(raw, e)
	}
	if err != nil {
		*e = entry[V]{}
		c.corrupt(ctx, key, err)
		return false
	}
	return true
}

// corrupt counts and reports an entry that did not decode (err). It is a
// function of its own so that decodeEntry, on the hit path, has a small
// stack frame.
func (c *Cache[V]) corrupt(ctx context.Context, key string, err error) {
	c.stats.corrupt.Add(1)
	c.observe(ctx, Event{Kind: EventCorrupt, Key: key, Err: err})
	c.logRare(ctx, slog.LevelWarn, "stampede: corrupt or foreign entry treated as a miss", key, err)
}

// envelopeValue returns the value part of an envelope that decodes (a
// substring of it, no copy), or "" for anything else.
func envelopeValue(s string) string { return envelope.Value(s) }

// isEnvelope reports whether a notification's payload is an envelope (a
// fill or Set that carried its value) rather than a marker.
func isEnvelope(payload string) bool { return envelope.Is(payload) }

func toMillis(t time.Time) int64 { return t.UnixMilli() }

// fromMillis returns a UTC time: no location pointer to copy around.
func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
