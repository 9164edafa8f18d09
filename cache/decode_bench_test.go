package cache

import (
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/envelope"
	"github.com/stampede-go/stampede/stale"
)

type decodeBenchValue struct {
	ID    int
	Name  string
	Tags  []string
	Score float64
}

// BenchmarkDecode is the CPU part of the hit path: envelope and value decode.
func BenchmarkDecode(b *testing.B) {
	c := &Cache[decodeBenchValue]{opts: Options{Codec: MsgpackCodec{}, MaxValueBytes: 1 << 20}}
	now := time.Now()
	w := stale.Policy{TTL: time.Hour}.Write(now, 0, 0.5)
	raw, err := c.encodeEntry(entry[decodeBenchValue]{value: decodeBenchValue{ID: 42, Name: "a report with a name of some length", Tags: []string{"a", "b", "c"}, Score: 0.5}, w: w})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("envelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := envelope.Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("envelope+value", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, value, err := envelope.Decode(raw)
			if err != nil {
				b.Fatal(err)
			}
			var v decodeBenchValue
			if err := c.opts.Codec.Unmarshal(value, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
