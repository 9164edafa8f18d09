package childproc_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/childproc"
	"github.com/stampede-go/stampede/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func sh(t *testing.T, script string) *childproc.Proc {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	p, err := childproc.Start(exec.Command("sh", "-c", script))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(0) })
	return p
}

func TestExitAtStartReportsOutput(t *testing.T) {
	p := sh(t, "echo bad config; exit 3")
	err := p.WaitReady(10*time.Second, func() error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "bad config") {
		t.Fatalf("err=%v", err)
	}
}

func TestNotReadyInTimeIsKilled(t *testing.T) {
	p := sh(t, "exec sleep 60")
	err := p.WaitReady(50*time.Millisecond, func() error { return errors.New("no answer") })
	if err == nil || !strings.Contains(err.Error(), "not ready within") {
		t.Fatalf("err=%v", err)
	}
}

func TestReadyThenStopGracefully(t *testing.T) {
	p := sh(t, "trap 'echo bye; exit 0' INT; echo up; while :; do sleep 0.01; done")
	if err := p.WaitReady(10*time.Second, func() error {
		if !strings.Contains(p.Logs(), "up") {
			return errors.New("not up")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.Stop(10 * time.Second)
	if !strings.Contains(p.Logs(), "bye") {
		t.Fatalf("SIGINT not delivered first: %q", p.Logs())
	}
}

func TestOnFreePortRetries(t *testing.T) {
	var ports []int
	err := childproc.OnFreePort(func(port int) error {
		ports = append(ports, port)
		if len(ports) < 3 {
			return errors.New("taken")
		}
		return nil
	})
	if err != nil || len(ports) != 3 || ports[2] <= 0 {
		t.Fatalf("err=%v ports=%v", err, ports)
	}
	if err := childproc.OnFreePort(func(int) error { return errors.New("always taken") }); err == nil {
		t.Fatal("no error after 5 failed starts")
	}
}
