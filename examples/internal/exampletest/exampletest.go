// Package exampletest runs an example program as its user does: the
// example's test binary, started again as the program (its main), with
// flags, against real servers on loopback.
//
//	func TestMain(m *testing.M) { exampletest.Main(m, main) }
package exampletest

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/internal/syncbuf"
)

// runMainEnv, set to "1", makes the test binary run the program's main.
const runMainEnv = "STAMPEDE_EXAMPLE_RUN_MAIN"

// timeout bounds every run of a program.
const timeout = time.Minute

// Main runs the program's main when the test binary was started as the
// program (by Run or Start), else the tests with the package's
// redis-server (redistest.Main).
func Main(m *testing.M, main func()) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	redistest.Main(m)
}

func command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

// Run runs the program with args to its end and returns what it printed on
// stdout. A failed run (exit status, or over a minute) fails the test, with
// the program's stderr.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := command(ctx, args)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the program %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// Program is a program started by Start.
type Program struct {
	// Stderr is what the program logged so far.
	Stderr *syncbuf.Buffer
}

// Start starts the program with args and returns once it accepts
// connections at listen; it is killed when the test ends.
func Start(t testing.TB, listen string, args ...string) *Program {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := command(ctx, args)
	p := &Program{Stderr: &syncbuf.Buffer{}}
	cmd.Stderr = p.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		cancel()
	})
	waitListening(t, listen, exited, p.Stderr)
	return p
}

// WaitListening returns once something accepts connections at addr (a
// program's second listener, say), or fails the test after 10 s.
func WaitListening(t testing.TB, addr string) {
	t.Helper()
	waitListening(t, addr, nil, nil)
}

// waitListening waits until addr accepts connections, the program exits
// (exited), or 10 s pass.
func waitListening(t testing.TB, addr string, exited chan error, stderr *syncbuf.Buffer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the program exited before it listened on %s: %v\nstderr:\n%s", addr, err, stderr.String())
		case <-time.After(20 * time.Millisecond): // the program is starting its listener
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listened on %s within 10 s: %v", addr, err)
		}
	}
}

// FreeAddr returns a loopback address nothing listens on, for a program's
// -listen flag.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Lines splits out into its lines, without their newlines.
func Lines(out string) []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
