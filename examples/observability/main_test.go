package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestMain runs main itself when the test binary is started as the program
// (TestEveryFamilyAtZeroBeforeTraffic does that), else the tests.
func TestMain(m *testing.M) {
	if os.Getenv("OBSERVABILITY_RUN_MAIN") == "1" {
		main()
		return
	}
	redistest.Main(m)
}

const (
	docPath = "../../docs/observability.md"
	// blockMarker is the line before the page's program: the block after
	// it must be this package's main.go, byte for byte.
	blockMarker = "<!-- examples/observability/main.go: a test checks that this block is that file -->"
	// commandsMarker is the line before the commands that build the
	// program from a clone.
	commandsMarker = "<!-- examples/observability/main_test.go runs these commands -->"
)

// docBlock returns the fenced block after marker in the page; opening is
// its opening fence line ("```go", "```").
func docBlock(t *testing.T, marker, opening string) string {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), marker+"\n"+opening+"\n")
	if !ok {
		t.Fatalf("%s has no line %q followed by a %s block", docPath, marker, opening)
	}
	block, _, ok := strings.Cut(after, "\n```\n")
	if !ok {
		t.Fatalf("%s: the block after %q is not closed", docPath, marker)
	}
	return block + "\n"
}

// TestDocBlockIsThisProgram keeps the page's example and this file from
// drifting apart: the page shows what this package compiles.
func TestDocBlockIsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if block := docBlock(t, blockMarker, "```go"); block != string(src) {
		t.Errorf("docs/observability.md's program differs from examples/observability/main.go: copy the file into the page\n--- page\n%s\n--- main.go\n%s", block, src)
	}
}

// documentedFamily is a metric family of the page's table and how it is
// exported: a histogram's series are NAME_count and its buckets.
type documentedFamily struct {
	name      string
	histogram bool
}

var tableRow = regexp.MustCompile("^\\| `(stampede_[a-z_]+)(\\{[^`]*\\})?` \\| ([a-z]+) \\|")

// documentedFamilies reads the page's metric table.
func documentedFamilies(t *testing.T) []documentedFamily {
	t.Helper()
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []documentedFamily
	for _, line := range strings.Split(string(doc), "\n") {
		if m := tableRow.FindStringSubmatch(line); m != nil {
			out = append(out, documentedFamily{name: m[1], histogram: m[3] == "histogram"})
		}
	}
	if len(out) < 10 {
		t.Fatalf("%s: found %d metric rows in the table, want its 17: the test's pattern no longer reads it", docPath, len(out))
	}
	return out
}

// scrape returns /metrics' lines for the namespace "reports", by series
// (name and labels) to value.
func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, res.Status, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "stampede_") && strings.Contains(line, `namespace="reports"`) {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				out[line[:i]] = line[i+1:]
			}
		}
	}
	return out
}

// seriesOf returns the scraped series of family f (a histogram's _count).
func seriesOf(scraped map[string]string, f documentedFamily) map[string]string {
	name := f.name
	if f.histogram {
		name += "_count"
	}
	out := map[string]string{}
	for s, v := range scraped {
		if strings.HasPrefix(s, name+"{") {
			out[s] = v
		}
	}
	return out
}

// TestEveryFamilyAtZeroBeforeTraffic runs the page's program against the
// package's redis-server and holds what the page says under it: before any
// request, /metrics has every family of the page's table for the cache's
// namespace, every series at 0 (stampede_breaker_open among them); after
// one request, the miss is counted and no family went missing.
func TestEveryFamilyAtZeroBeforeTraffic(t *testing.T) {
	redisAddr := redistest.Addr(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-redis", redisAddr, "-listen", listen)
	cmd.Env = append(os.Environ(), "OBSERVABILITY_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The program logs "listening on ..." just before it listens; then
	// a refused connection means only that the listener is a moment away.
	var logged bytes.Buffer
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		logged.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "listening on") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	if !strings.Contains(logged.String(), "listening on") {
		t.Fatalf("the program did not start; stderr:\n%s", logged.String())
	}
	base := "http://" + listen
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program never listened on %s: %v", listen, err)
		}
		time.Sleep(20 * time.Millisecond) // between the log line and Listen
	}

	families := documentedFamilies(t)
	before := scrape(t, base+"/metrics")
	for _, f := range families {
		series := seriesOf(before, f)
		if len(series) == 0 {
			t.Errorf("before traffic, /metrics has no %s series for namespace reports", f.name)
		}
		for s, v := range series {
			if v != "0" {
				t.Errorf("before traffic, %s = %s, want 0", s, v)
			}
		}
	}

	res, err := http.Get(base + "/reports/42")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /reports/42: %s", res.Status)
	}
	after := scrape(t, base+"/metrics")
	if v := after[`stampede_requests_total{namespace="reports",outcome="miss"}`]; v != "1" {
		t.Errorf(`after one request, stampede_requests_total{outcome="miss"} = %q, want 1`, v)
	}
	for _, f := range families {
		if len(seriesOf(after, f)) == 0 {
			t.Errorf("after traffic, /metrics has no %s series for namespace reports", f.name)
		}
	}
}

// TestDocCommandsBuildItFromAClone runs the page's commands in a new module
// holding the program, with this checkout as the clone, then builds it: a
// module that imports the adapters needs a replace for each of them.
func TestDocCommandsBuildItFromAClone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not in -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	// examples/go.sum holds every checksum the module needs: starting
	// from it keeps the test from asking the checksum database.
	sum, err := os.ReadFile("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string][]byte{
		"main.go": src, "go.sum": sum,
		"go.mod": []byte("module example.com/observability\n\ngo 1.26.0\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	commands := 0
	for _, line := range strings.Split(docBlock(t, commandsMarker, "```"), "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		args := strings.Fields(strings.ReplaceAll(line, "../stampede", root))
		if args[0] != "go" {
			t.Fatalf("%s: the commands block runs %q: only go commands are expected", docPath, line)
		}
		run(args...)
		commands++
	}
	if commands == 0 {
		t.Fatalf("%s: no commands after %q", docPath, commandsMarker)
	}
	run("go", "build", "-o", os.DevNull, ".")
}
