package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/internal/syncbuf"
)

// TestMain runs main itself when the test binary is started as the program
// (TestFirstProgramServes does that), else the tests.
func TestMain(m *testing.M) {
	if os.Getenv("FIRSTPROGRAM_RUN_MAIN") == "1" {
		main()
		return
	}
	redistest.Main(m)
}

// readmeMarker is the line before the README's first program: the block
// after it must be this package's main.go, byte for byte.
const readmeMarker = "<!-- examples/firstprogram/main.go: a test checks that this block is that file -->"

// TestREADMEBlockIsThisProgram keeps the README's first program and this
// file from drifting apart: the README shows what this package compiles.
func TestREADMEBlockIsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), readmeMarker+"\n```go\n")
	if !ok {
		t.Fatalf("README.md has no line %q followed by a ```go block", readmeMarker)
	}
	block, _, ok := strings.Cut(after, "\n```\n")
	if !ok {
		t.Fatal("README.md: the first program's block is not closed")
	}
	if block+"\n" != string(src) {
		t.Errorf("README.md's first program differs from examples/firstprogram/main.go: copy the file into the README\n--- README\n%s\n--- main.go\n%s", block, src)
	}
}

// TestFirstProgramServes runs the program against the package's
// redis-server: it prints the computed report, then serves the route, the
// second request from the cache.
func TestFirstProgramServes(t *testing.T) {
	redisAddr := redistest.Addr(t)
	listen := exampletest.FreeAddrs(t, 1)[0]

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-redis", redisAddr, "-listen", listen)
	cmd.Env = append(os.Environ(), "FIRSTPROGRAM_RUN_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "report 42 total 1234\n" {
		t.Fatalf("first line %q (%v), want %q; stderr:\n%s", line, err, "report 42 total 1234\n", stderr.String())
	}

	url := "http://" + listen + "/reports/42"
	var res *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		res, err = http.Get(url)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the program is still starting its listener
	}
	if err != nil {
		t.Fatalf("GET %s: %v; stderr:\n%s", url, err, stderr.String())
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Cache") != "MISS" {
		t.Fatalf("first GET: %s, X-Cache %q, want 200 MISS", res.Status, res.Header.Get("X-Cache"))
	}
	res, err = http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("second GET: %s, X-Cache %q, want 200 HIT", res.Status, res.Header.Get("X-Cache"))
	}
}

// TestFirstProgramSaysRedisIsUnreachable runs the program with a wrong
// Redis address (a port nothing listens on): before its report, it says
// that Redis is unreachable and why, in go-redis' words for a refused
// dial, and it still computes the report (locally) at once (issue 41: it
// used to serve degraded answers without a word of its own).
func TestFirstProgramSaysRedisIsUnreachable(t *testing.T) {
	refused := redistest.RefusingAddr(t)
	listen := exampletest.FreeAddrs(t, 1)[0]

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-redis", refused, "-listen", listen)
	cmd.Env = append(os.Environ(), "FIRSTPROGRAM_RUN_MAIN=1")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "report 42 total 1234\n" {
		t.Fatalf("first line %q (%v), want %q; stderr:\n%s", line, err, "report 42 total 1234\n", stderr.String())
	}
	// The compute takes 200 ms; a refused connection must add next to
	// nothing (it used to add 0.5 s a call), with room for a loaded machine.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the report took %s with Redis refusing connections", took)
	}
	logs := stderr.String()
	for _, want := range []string{"Redis at " + refused + " is unreachable", "connect: connection refused"} {
		if !strings.Contains(logs, want) {
			t.Errorf("stderr before the report does not say %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "RedisTimeout") {
		t.Errorf("stderr blames the Redis budget for a refused connection:\n%s", logs)
	}
}
