package main

import (
	"testing"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// TestInvalidateTagsMakesTheNextCallCompute runs the page's program against
// a real redis-server and holds what docs/invalidation.md says of it: a
// tagged value answers from the cache until InvalidateTags of one of its
// tags, after which the next call computes it again; a Set after the
// invalidation is not invalidated by it, and the next InvalidateTags of its
// tag (given by cache.WithTags) removes it too.
func TestInvalidateTagsMakesTheNextCallCompute(t *testing.T) {
	out := exampletest.Run(t, "-redis", redistest.Addr(t))
	want := `report 42: built by compute 1
report 42: built by compute 1
invalidated customer:7
report 42: built by compute 2
report 43 found: true
invalidated customer:7
report 43 found: false
report 42: built by compute 3
`
	if out != want {
		t.Errorf("the program printed\n%s\nwant\n%s", out, want)
	}
}
