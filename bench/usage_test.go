package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// -h prints the usage and exits 0; a bad flag exits 1 and says why.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}} {
		var errOut bytes.Buffer
		if code := exitCode(context.Background(), args, io.Discard, &errOut, func(string) string { return "" }); code != 0 {
			t.Errorf("%v: exit %d, want 0\n%s", args, code, errOut.String())
		}
		if !strings.Contains(errOut.String(), "-scenarios") {
			t.Errorf("%v: no usage printed:\n%s", args, errOut.String())
		}
	}
	var errOut bytes.Buffer
	if code := exitCode(context.Background(), []string{"-replicas", "0"}, io.Discard, &errOut, func(string) string { return "" }); code != 1 {
		t.Errorf("bad flag: exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "bench: need") {
		t.Errorf("bad flag: no reason printed:\n%s", errOut.String())
	}
}

// A hits row has no expiries to count: its origin columns are blank, not
// the warm-up's calls divided by a made-up expiry.
func TestHitsRowLeavesOriginBlank(t *testing.T) {
	r := Result{Scenario: "hits", Keys: "hot", Strategy: "stampede-wait", OriginCalls: 8, PeakOrigin: 1}
	r.finish(0)
	row := r.row()
	if row[3] != "" || row[4] != "" {
		t.Errorf("hits row: calls/expiry %q, peak %q; want both blank", row[3], row[4])
	}
	s := Result{Scenario: "storm", Keys: "hot", Strategy: "stampede-wait", OriginCalls: 3, Expiries: 3, PeakOrigin: 1}
	s.finish(0)
	if row := s.row(); row[3] != "1.00" || row[4] != "1" {
		t.Errorf("storm row: calls/expiry %q, peak %q", row[3], row[4])
	}
}
