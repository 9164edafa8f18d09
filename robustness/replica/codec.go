package main

import (
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/robustness/wire"
)

// slowCodec is msgpack, made as slow to encode a large value as a real
// codec can be on a busy machine: 1 ms per 2 KiB of padding. It widens the
// window between a fill's last invalidation check and its write, which is
// where a load must not be shared past an invalidation.
type slowCodec struct{ cache.MsgpackCodec }

func (c slowCodec) Marshal(v any) ([]byte, error) {
	if p, ok := v.(*wire.Value); ok && len(p.Pad) > 0 {
		time.Sleep(time.Duration(len(p.Pad)/2048) * time.Millisecond) // the cost being simulated
	}
	return c.MsgpackCodec.Marshal(v)
}
