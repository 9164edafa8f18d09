package plant

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/robustness"
)

// Every planted bug still applies to the code as it is: its text occurs
// exactly once in its file (a plant that no longer applies measures
// nothing).
func TestEveryPlantApplies(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, b := range Bugs {
		if seen[b.Name] {
			t.Errorf("two plants named %s", b.Name)
		}
		seen[b.Name] = true
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.File)))
		if err != nil {
			t.Errorf("%s: %v", b.Name, err)
			continue
		}
		if n := strings.Count(string(src), b.Old); n != 1 {
			t.Errorf("%s: %q occurs %d times in %s, want once", b.Name, b.Old, n, b.File)
		}
	}
}

// Apply refuses a plant whose text is missing, and changes nothing then.
func TestApplyRefusesAMissingText(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.go")
	if err := os.WriteFile(path, []byte("package f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (Bug{Name: "x", File: "f.go", Old: "absent", New: "y"}).Apply(dir); err == nil {
		t.Fatal("a plant whose text is missing applied")
	}
	if b, _ := os.ReadFile(path); string(b) != "package f\n" {
		t.Fatalf("the file changed: %q", b)
	}
}

// The scenarios a plant names are the short profile's, and a lease plant
// names none (TestLockSet has no scenarios to choose).
func TestPlantScenariosAreTheShortProfiles(t *testing.T) {
	var names []string
	for _, sc := range robustness.Profile("short") {
		names = append(names, sc.Name)
	}
	for _, b := range Bugs {
		if b.Test != "" && len(b.Scenarios) > 0 {
			t.Errorf("%s: scenarios %v for %s", b.Name, b.Scenarios, b.Test)
		}
		for _, sc := range b.Scenarios {
			if !slices.Contains(names, sc) {
				t.Errorf("%s: no scenario %q in the short profile %v", b.Name, sc, names)
			}
		}
	}
}
