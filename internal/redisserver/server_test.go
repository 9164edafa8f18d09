package redisserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redisserver"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// started fails the test when err is not nil, or skips it when the binary
// is missing (except under CI=true).
func started(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, redisserver.ErrNoBinary) && !strings.EqualFold(getenv("CI"), "true") {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, opts redisserver.Options) *redisserver.Server {
	t.Helper()
	s, err := redisserver.Start(opts)
	started(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func do(t *testing.T, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

func TestStartStopRestart(t *testing.T) {
	s := start(t, redisserver.Options{})
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.URL() != "redis://"+s.Addr() {
		t.Fatalf("addr %q url %q", s.Addr(), s.URL())
	}
	if v := s.Version(); v == "" || v == "unknown" {
		t.Fatalf("version %q", v)
	}
	if got := do(t, s.Addr(), "SET k v"); got != "+OK" {
		t.Fatal(got)
	}
	if got := do(t, s.Addr(), "CONFIG GET save"); got != "*2" {
		t.Fatalf("CONFIG GET save: %s", got)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// No persistence: the restart lost the key.
	if got := do(t, s.Addr(), "EXISTS k"); got != ":0" {
		t.Fatalf("EXISTS after restart: %s", got)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

func TestAppendOnlyKeepsDataAcrossRestart(t *testing.T) {
	s := start(t, redisserver.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	if got := do(t, s.Addr(), "SET k v"); got != "+OK" {
		t.Fatal(got)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := do(t, s.Addr(), "EXISTS k"); got != ":1" {
		t.Fatalf("EXISTS after restart with AOF: %s", got)
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := redisserver.Start(redisserver.Options{Binary: "/nonexistent/redis-server"})
	if !errors.Is(err, redisserver.ErrNoBinary) {
		t.Fatalf("err=%v", err)
	}
}

func TestBadArgsFailClearly(t *testing.T) {
	if _, err := redisserver.LookPath(""); err != nil {
		t.Skip(err)
	}
	_, err := redisserver.Start(redisserver.Options{Args: []string{"--no-such-option", "x"}})
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("err=%v", err)
	}
}

func TestStartIndependent(t *testing.T) {
	servers, err := redisserver.StartIndependent(3, redisserver.Options{})
	started(t, err)
	t.Cleanup(func() {
		for _, s := range servers {
			_ = s.Close()
		}
	})
	for i, s := range servers {
		if got := do(t, s.Addr(), fmt.Sprintf("SET k%d v", i)); got != "+OK" {
			t.Fatalf("SET on %s: %s", s.Addr(), got)
		}
	}
	for i, s := range servers {
		for j := range servers {
			want := ":0"
			if i == j {
				want = ":1"
			}
			if got := do(t, s.Addr(), fmt.Sprintf("EXISTS k%d", j)); got != want {
				t.Fatalf("server %d: EXISTS k%d = %s, want %s: the servers share data", i, j, got, want)
			}
		}
	}
}
