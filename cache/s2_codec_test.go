package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// row is a value of the kind a cache holds: a page of records.
type row struct {
	ID    int
	Name  string
	Tags  []string
	Score float64
	Desc  string
}

func rows(n int) []row {
	out := make([]row, n)
	for i := range out {
		out[i] = row{ID: i * 7919, Name: fmt.Sprintf("product %d of the catalogue", i), Tags: []string{"a", "tag", fmt.Sprint(i % 13)},
			Score: float64(i) / 3, Desc: "an item with a description of some length " + fmt.Sprint(i*31)}
	}
	return out
}

func TestS2CodecRoundTrip(t *testing.T) {
	for _, c := range []cache.S2Codec{{}, {MinBytes: 1}, {Codec: cache.MsgpackCodec{}, MinBytes: 1 << 20}} {
		for _, n := range []int{0, 1, 8, 500} {
			in := rows(n)
			b, err := c.Marshal(&in)
			if err != nil {
				t.Fatal(err)
			}
			var out []row
			if err := c.Unmarshal(b, &out); err != nil {
				t.Fatalf("%+v, %d rows: %v", c, n, err)
			}
			if len(out) != n || (n > 0 && (out[n-1].Desc != in[n-1].Desc || out[n-1].ID != in[n-1].ID)) {
				t.Fatalf("%+v, %d rows: round trip lost data", c, n)
			}
			raw, _ := msgpack.Marshal(&in)
			if c.MinBytes != 1<<20 && len(raw) >= 1024 && len(b) >= len(raw)/2 {
				t.Errorf("%d rows: %d bytes compressed from %d", n, len(b), len(raw))
			}
		}
	}
}

// Corrupt frames are errors, never panics; the cache reads them as corrupt
// entries.
func TestS2CodecRejectsCorruptFrames(t *testing.T) {
	var c cache.S2Codec
	good, err := c.Marshal(&[]string{strings.Repeat("compressible ", 200)})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":     nil,
		"kind":      {7, 1, 2},
		"truncated": good[:len(good)/2],
		"garbage":   append([]byte{1}, bytes.Repeat([]byte{0xff}, 40)...),
		"huge":      {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		var v []string
		if err := c.Unmarshal(b, &v); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Through Redis: the stored entry is the compressed one, and it reads back;
// a cache of another codec on the same keys sees a foreign entry.
func TestS2CodecStoresCompressed(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	c := newCache[[]row](t, rdb, cache.Options{Namespace: ns, Codec: cache.S2Codec{}, TTL: time.Minute})
	in := rows(200)
	if err := c.Set(ctx, "k", in); err != nil {
		t.Fatal(err)
	}
	got, found, err := c.Get(ctx, "k")
	if err != nil || !found || len(got) != 200 || got[199].Desc != in[199].Desc {
		t.Fatalf("read back %d rows, found %v: %v", len(got), found, err)
	}
	raw, _ := msgpack.Marshal(&in)
	stored := rdb.StrLen(ctx, "{"+ns+":k}:v").Val()
	if stored >= int64(len(raw))/2 {
		t.Fatalf("stored %d bytes for %d of msgpack", stored, len(raw))
	}
	plain := newCache[[]row](t, rdb, cache.Options{Namespace: ns, TTL: time.Minute})
	if _, found, err := plain.Get(ctx, "k"); found || err != nil {
		t.Fatalf("a msgpack cache read the S2 entry: found %v %v", found, err)
	}
}

// BenchmarkS2Codec measures what S2Codec costs and saves against
// MsgpackCodec, per value size: stored bytes and encode and decode time.
func BenchmarkS2Codec(b *testing.B) {
	for _, n := range []int{8, 128, 512} {
		v := rows(n)
		for _, codec := range []cache.Codec{cache.MsgpackCodec{}, cache.S2Codec{}} {
			enc, err := codec.Marshal(&v)
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("%dB/%T", len(enc), codec)
			b.Run(name+"/encode", func(b *testing.B) {
				for b.Loop() {
					if _, err := codec.Marshal(&v); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(enc)), "stored-bytes")
			})
			b.Run(name+"/decode", func(b *testing.B) {
				for b.Loop() {
					var out []row
					if err := codec.Unmarshal(enc, &out); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
