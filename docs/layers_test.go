package docs

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// module is the library's module path.
const module = "github.com/stampede-go/stampede"

// layer says, for a package of the library module (by its path relative to
// the module), which of the module's packages its non-test code may import.
// design.md's "Who may import whom" is this table in words; a package that
// is not listed fails the test, so a new package is placed on purpose.
var layer = map[string][]string{
	// The library: arrows point down only.
	"singleflight":      nil,
	"stale":             nil,
	"internal/fencelua": nil,
	// The dial hook the cache's Redis steps and the lease's share.
	"internal/dialwatch": nil,
	"lease":              {"internal/fencelua", "internal/dialwatch"},
	"cache":              {"singleflight", "stale", "lease", "cache/internal/"},
	"middleware":         {"cache"},

	// Test and example infrastructure: never imported by the library.
	"internal/childproc":   nil,
	"internal/leakcheck":   nil,
	"internal/syncbuf":     nil,
	"internal/faultproxy":  {"internal/childproc"},
	"internal/redisserver": {"internal/childproc"},
	"internal/pgserver":    {"internal/childproc"},
	"internal/redistest":   {"internal/redisserver", "internal/leakcheck"},
	"internal/pgtest":      {"internal/pgserver", "internal/redistest"},
	"internal/embedded":    {"internal/redisserver"},
	"docs":                 nil,

	// The robustness suite sits on top of everything it tests.
	"robustness/wire":                 nil,
	"robustness/lockreplica/lockwire": nil,
	"robustness/lockreplica/pgwire":   nil,
	"robustness/lockreplica":          {"lease", "robustness/lockreplica/"},
	"robustness/replica":              {"cache", "middleware", "robustness/wire"},
	"robustness":                      {"lease", "internal/faultproxy", "internal/redisserver", "robustness/"},
	// The planted bugs edit a copy of the source; they import nothing of it.
	"robustness/plant":     nil,
	"robustness/cmd/plant": {"robustness/plant"},

	// The protocol layer under cache/ (issue 29): its packages import only
	// each other; nothing in them sees cache's public API or V.
	"cache/internal/": {"cache/internal/"},
	// The budget and breaker of a Redis step: under everything else of
	// cache/, it imports nothing of the module (cache hands it the
	// sentinel a step past its budget matches), but the dial hook it
	// shares with lease.
	"cache/internal/redisstep": {"internal/dialwatch"},
	// The invalidation marks as a process holds them: the model, the
	// check, the heartbeats' trust, the announcements. Redis reaches them
	// only as functions cache hands in, so they import no Redis step; they
	// share a read among its callers with singleflight, a leaf of the
	// library below cache (design.md says why it is allowed here).
	"cache/internal/marks": {"singleflight", "cache/internal/envelope"},
	// The process-local store: entries of a type it never looks inside,
	// in the bounded map, with the leases' fence.
	"cache/internal/localstore": {"cache/internal/clockmap"},
	// The Redis protocol's steps, in envelopes: they read the marks' floor
	// and make their announcement (marks), run within a budget
	// (redisstep), and never look inside an envelope (no envelope), nor
	// reach a decision: what they meet goes to cache through its hooks.
	"cache/internal/redisstore": {
		"cache/internal/marks", "cache/internal/notify", "cache/internal/rediskey",
		"cache/internal/redisstep", "cache/internal/retry", "cache/internal/scripts",
	},
}

// libraryModules are the only modules outside the standard library that the
// library's packages may import (docs/dependencies.md says why each).
var libraryModules = map[string][]string{
	"singleflight":      {"golang.org/x/sync/"},
	"stale":             nil,
	"internal/fencelua": nil,
	"lease":             {"github.com/redis/go-redis/v9"},
	"cache": {
		"github.com/redis/go-redis/v9", "golang.org/x/sync/",
		"github.com/vmihailenco/msgpack/v5", "github.com/klauspost/compress/s2",
	},
	"cache/internal/": {
		"github.com/redis/go-redis/v9", "golang.org/x/sync/",
		"github.com/vmihailenco/msgpack/v5",
	},
	"middleware": {"github.com/go-chi/chi/v5", "github.com/redis/go-redis/v9"},
}

// goPackage is the part of `go list -json` this test reads.
type goPackage struct {
	ImportPath string
	Imports    []string
	Standard   bool
}

// layeredModules are the directories of the modules whose packages the
// layer table places: the library's, and the two nested modules that hold
// the repository's test infrastructure outside it (issue 41) yet import
// its internal packages: the robustness suite and internal/embedded. The
// examples, contrib and bench modules are users of the library, not layers.
var layeredModules = []string{"..", "../robustness", "../internal/embedded"}

// listPackages lists every package of layeredModules.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	var pkgs []goPackage
	for _, dir := range layeredModules {
		pkgs = append(pkgs, listModulePackages(t, dir)...)
	}
	return pkgs
}

// listModulePackages lists every package of the module in dir.
func listModulePackages(t *testing.T, dir string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list in %s: %v\n%s", dir, err, exit.Stderr)
		}
		t.Fatalf("go list in %s: %v", dir, err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list found no packages in %s", dir)
	}
	return pkgs
}

// lookup finds the rule for rel: its own entry, or the entry of a parent
// ending in "/" (a family of packages such as cache/internal/...).
func lookup(table map[string][]string, rel string) ([]string, bool) {
	if allowed, ok := table[rel]; ok {
		return allowed, true
	}
	for prefix, allowed := range table {
		if strings.HasSuffix(prefix, "/") && strings.HasPrefix(rel, prefix) {
			return allowed, true
		}
	}
	return nil, false
}

// allows reports whether path is covered by one of the entries: an exact
// match, or a prefix ending in "/".
func allows(entries []string, path string) bool {
	for _, e := range entries {
		if path == e || (strings.HasSuffix(e, "/") && strings.HasPrefix(path, e)) {
			return true
		}
	}
	return false
}

// TestImportsPointDown holds design.md's layering: every package of the
// library module imports only the module's packages its layer allows, and
// the library's packages import only the dependencies docs/dependencies.md
// names.
func TestImportsPointDown(t *testing.T) {
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		allowed, ok := lookup(layer, rel)
		if !ok {
			t.Errorf("package %s has no place in docs/layers_test.go's table (and design.md): say which layer it belongs to", rel)
			continue
		}
		external, isLibrary := lookup(libraryModules, rel)
		var bad []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				if !allows(allowed, strings.TrimPrefix(imp, module+"/")) {
					bad = append(bad, imp)
				}
				continue
			}
			if isLibrary && strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") && !allows(external, imp) {
				bad = append(bad, imp)
			}
		}
		sort.Strings(bad)
		for _, imp := range bad {
			t.Errorf("%s imports %s, which its layer does not allow (see docs/design.md)", rel, imp)
		}
	}
}

// TestLayerTableSelfCheck keeps the rule matcher honest: a library package
// reaching up, or into the test infrastructure, is refused.
func TestLayerTableSelfCheck(t *testing.T) {
	cases := []struct {
		pkg, imp string
		want     bool
	}{
		{"cache", "lease", true},
		{"cache", "middleware", false},
		{"cache", "internal/redisserver", false},
		{"cache", "cache/internal/redisproto", true},
		{"cache/internal/redisproto", "cache", false},
		{"cache/internal/redisproto", "cache/internal/envelope", true},
		{"cache", "cache/internal/redisstep", true},
		{"cache/internal/redisstep", "cache", false},
		{"cache/internal/redisstep", "cache/internal/notify", false},
		{"cache", "cache/internal/marks", true},
		{"cache/internal/marks", "cache", false},
		{"cache/internal/marks", "singleflight", true},
		{"cache/internal/marks", "cache/internal/envelope", true},
		{"cache/internal/marks", "cache/internal/redisstep", false},
		{"cache/internal/marks", "cache/internal/scripts", false},
		{"cache/internal/marks", "stale", false},
		{"cache", "cache/internal/redisstore", true},
		{"cache/internal/redisstore", "cache", false},
		{"cache/internal/redisstore", "cache/internal/scripts", true},
		{"cache/internal/redisstore", "cache/internal/redisstep", true},
		{"cache/internal/redisstore", "cache/internal/marks", true},
		{"cache/internal/redisstore", "cache/internal/envelope", false},
		{"cache/internal/redisstore", "singleflight", false},
		{"cache/internal/redisstore", "lease", false},
		{"lease", "cache", false},
		{"middleware", "cache", true},
		{"singleflight", "stale", false},
	}
	for _, c := range cases {
		allowed, ok := lookup(layer, c.pkg)
		if !ok {
			t.Fatalf("no rule for %s", c.pkg)
		}
		if got := allows(allowed, c.imp); got != c.want {
			t.Errorf("%s importing %s: allowed=%v, want %v", c.pkg, c.imp, got, c.want)
		}
	}
}
