package docs

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// libraryPackages are the packages a consumer imports: every non-internal
// package of the library module.
var libraryPackages = []string{"cache", "middleware", "lease", "singleflight", "stale"}

// testOnlyModules are modules the repository's suites, examples and bench
// use; none may reach a consumer's module graph (issue 41). The general
// rule is checked below; these names pin the ones that once did.
var testOnlyModules = []string{
	"github.com/alicebob/miniredis/v2",  // internal/embedded, its own module
	"github.com/yuin/gopher-lua",        // miniredis' Lua
	"github.com/anishathalye/porcupine", // robustness, its own module
}

// libraryImports returns the modules (other than the library) that the
// library's packages import, directly or through a dependency.
func libraryImports(t *testing.T, root string) map[string]bool {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}{{end}}{{end}}"}
	for _, p := range libraryPackages {
		args = append(args, "./"+p+"/...")
	}
	return lines(goCmd(t, root, nil, args...))
}

// goCmd runs the go command in dir with env added and returns its standard
// output, failing the test with its standard error.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, exit.Stderr)
		}
		t.Fatalf("go %s (in %s): %v", strings.Join(args, " "), dir, err)
	}
	return string(out)
}

// lines returns the non-empty lines of s as a set.
func lines(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out[l] = true
		}
	}
	return out
}

// TestLibraryGoModListsOnlyWhatItImports holds docs/dependencies.md: the
// library's go.mod requires only modules its packages (cache, middleware,
// lease, singleflight, stale) import, directly or through a dependency.
// The root module's tests and test helpers make do with those; whatever
// else the repository's suites, examples and bench need lives in modules of
// their own and never reaches a consumer.
func TestLibraryGoModListsOnlyWhatItImports(t *testing.T) {
	imported := libraryImports(t, "..")
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal([]byte(goCmd(t, "..", nil, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatalf("decoding go mod edit -json: %v", err)
	}
	if len(mod.Require) == 0 {
		t.Fatal("go.mod requires nothing: the test reads the wrong file")
	}
	for _, r := range mod.Require {
		if !imported[r.Path] {
			t.Errorf("go.mod requires %s, which no package of the library imports: move what needs it into a module of its own (as robustness/, internal/embedded/, examples/, bench/ are)", r.Path)
		}
	}
}

// TestConsumerModuleGraphHasOnlyLibraryDependencies builds what a user
// builds: a module of its own that imports every package of the library
// (with a replace to this checkout, since the module is not published
// here), runs `go mod tidy`, and holds that `go list -m all` shows the
// library, the modules it imports, and what those modules' own go.mod files
// require (their tests' dependencies, which the library cannot remove):
// nothing the library's suites, examples or bench use.
func TestConsumerModuleGraphHasOnlyLibraryDependencies(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var imports strings.Builder
	for _, p := range libraryPackages {
		imports.WriteString("\t_ \"" + module + "/" + p + "\"\n")
	}
	files := map[string]string{
		"go.mod": "module example.com/consumer\n\ngo 1.26.0\n\nrequire " + module + " v0.0.0\n\nreplace " + module + " => " + root + "\n",
		"main.go": "// Command consumer imports the library as a user's program does.\npackage main\n\nimport (\n" +
			imports.String() + ")\n\nfunc main() {}\n",
	}
	// The library's go.sum has every checksum the consumer needs; starting
	// from it keeps the test from asking the checksum database.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.sum"] = string(sum)
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	goCmd(t, dir, env, "mod", "tidy")
	graph := lines(goCmd(t, dir, env, "list", "-m", "-f", "{{.Path}}", "all"))

	// What the library imports, and what those modules' go.mod files require.
	imported := libraryImports(t, root)
	allowed := map[string]bool{"example.com/consumer": true, module: true}
	for m := range imported {
		allowed[m] = true
	}
	for edge := range lines(goCmd(t, dir, env, "mod", "graph")) {
		from, to, ok := strings.Cut(edge, " ")
		if !ok {
			continue
		}
		fromPath, _, _ := strings.Cut(from, "@")
		toPath, _, _ := strings.Cut(to, "@")
		if imported[fromPath] {
			allowed[toPath] = true
		}
	}
	var stray []string
	for m := range graph {
		if !allowed[m] {
			stray = append(stray, m)
		}
	}
	for _, m := range testOnlyModules {
		if graph[m] && allowed[m] { // not already counted above
			stray = append(stray, m)
		}
	}
	sort.Strings(stray)
	for _, m := range stray {
		t.Errorf("a consumer's `go list -m all` shows %s, which the library does not import", m)
	}
}
