// Package leakcheck reports goroutines left running after a package's tests.
// It is used from each package's TestMain.
package leakcheck

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Find returns the stacks of goroutines other than the calling one that are
// still running after waiting up to timeout for them to end.
func Find(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		left := interesting()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond) // goroutines end asynchronously: poll until they do
	}
}

func interesting() []string {
	buf := Stacks()
	var out []string
	stacks := strings.Split(buf, "\n\n")
	for i, g := range stacks {
		if i == 0 { // the calling goroutine
			continue
		}
		if isIgnored(g) {
			continue
		}
		out = append(out, g)
	}
	return out
}

func isIgnored(stack string) bool {
	lines := strings.Split(stack, "\n")
	if len(lines) < 2 {
		return true
	}
	top := lines[1]
	for _, ig := range []string{"testing.(*M).", "testing.tRunner", "testing.runTests", "runtime.gc", "os/signal.signal_recv", "runtime.ReadTrace", "runtime.ensureSigM"} {
		if strings.Contains(top, ig) {
			return true
		}
	}
	for _, ig := range []string{"created by runtime.gc", "created by os/signal.Notify", "created by testing.(*T).Run", "created by testing.runTests"} {
		if strings.Contains(stack, ig) && !strings.Contains(stack, "stampede-go/stampede") {
			return true
		}
	}
	return false
}

// Main runs the tests and fails the binary when goroutines leak. Use it as
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run runs the tests and returns the exit code, 1 when goroutines leak.
func Run(m *testing.M) int {
	return Check(m.Run())
}

// Check returns code, or 1 when code is 0 and goroutines are still running.
// Call it after stopping what the tests started.
func Check(code int) int {
	if code != 0 {
		return code
	}
	if left := Find(5 * time.Second); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "leakcheck: %d goroutine(s) still running after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
		return 1
	}
	return 0
}
