// Package exampletest runs an example program as its user does: the
// example's test binary, started again as the program (its main), with
// flags, against real servers on loopback.
//
//	func TestMain(m *testing.M) { exampletest.Main(m, main) }
package exampletest

import (
	"bufio"
	"context"
	"fmt"
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

// attempts bounds how often Start starts a program whose address another
// process took between FreeAddrs and the program's bind.
const attempts = 3

// Start picks n distinct free loopback addresses, starts the program with
// the arguments args gives for them (its -listen flags), and returns once
// it accepts connections at every one; it is killed when the test ends.
// A program that exits because another process bound one of its
// addresses first is started again on new ones.
func Start(t testing.TB, n int, args func(addrs []string) []string) (*Program, []string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		addrs := FreeAddrs(t, n)
		p, err := start(t, addrs, args(addrs))
		if err == nil {
			return p, addrs
		}
		if !strings.Contains(p.Stderr.String(), "address already in use") || attempt == attempts {
			t.Fatal(err)
		}
		t.Logf("started again on new addresses: %v", err)
	}
}

// start starts the program and waits until it accepts connections at
// every one of addrs; an error says it exited first or nothing listened
// within 10 s.
func start(t testing.TB, addrs, args []string) (*Program, error) {
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
	for _, addr := range addrs {
		if err := waitListening(addr, exited, p.Stderr); err != nil {
			return p, err
		}
	}
	return p, nil
}

// waitListening waits until addr accepts connections, the program exits
// (exited), or 10 s pass.
func waitListening(addr string, exited chan error, stderr *syncbuf.Buffer) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the program exited before it listened on %s: %w\nstderr:\n%s", addr, err, stderr.String())
		case <-time.After(20 * time.Millisecond): // the program is starting its listener
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listened on %s within 10 s: %w", addr, err)
		}
	}
}

// FreeAddrs returns n distinct loopback addresses nothing listens on, for
// a program's -listen flags. Each is held until all are picked, so that
// the kernel cannot hand the same port out twice; another process may
// still bind one before the program does (Start starts it again then).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
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
