package main

import (
	"slices"
	"testing"
)

// violations reads the broken properties and the failed scenarios' seeds
// from the short profile's output as go test prints it.
func TestViolationsReadsTheProfilesOutput(t *testing.T) {
	out := []byte(`--- FAIL: TestRobustness (69.86s)
    --- FAIL: TestRobustness/redis-busy (13.21s)
        robustness_test.go:75: seed 1796523758968324440: 2257 operations, 884 computes, 5 faults; 13 violations
        robustness_test.go:85: selected: h1| (noise false) answered c22, made for h1|host=evil.example
        robustness_test.go:85: one compute: k0 computed twice at once
        robustness_test.go:87: replay: go test -C robustness . -run 'TestRobustness/redis-busy$' -robustness.seed=1796523758968324440
    --- FAIL: TestRobustness/local (13.12s)
        robustness_test.go:75: seed 42: 3463 operations, 1198 computes, 0 faults; 1 violations
        robustness_test.go:85: documented errors: get: answered other
    --- PASS: TestRobustness/redis-overload (6.1s)
        robustness_test.go:75: seed 7: 100 operations, 10 computes, 1 faults; 0 violations
`)
	props, seeds := violations(out)
	if want := []string{"selected", "one compute", "documented errors"}; !slices.Equal(props, want) {
		t.Errorf("properties %q, want %q", props, want)
	}
	if want := []string{"1796523758968324440 (redis-busy)", "42 (local)"}; !slices.Equal(seeds, want) {
		t.Errorf("seeds %q, want %q", seeds, want)
	}
}
