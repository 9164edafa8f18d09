package main

import (
	"testing"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// TestCallsAnswerAsThePageSays runs the page's program against a real
// redis-server and holds what docs/cache.md says of its calls: GetOrCompute
// computes a missing key; Fetch of that key is a Hit, of a new key a Miss
// aged 0; GetOrComputeMany hands its function only the keys not in the
// cache, and a key the function leaves out is in KeyErrors, matching
// ErrMissingFromBatch, while the others have their values.
func TestCallsAnswerAsThePageSays(t *testing.T) {
	out := exampletest.Run(t, "-redis", redistest.Addr(t))
	want := `report 42 total 1234
Fetch 42 hit
Fetch 7 miss age 0s
loadReports [8 9]
batch 7 total 1234
batch 8 total 800
batch 9 no value, missing from loadReports' answer: true
`
	if out != want {
		t.Errorf("the program printed\n%s\nwant\n%s", out, want)
	}
}
