package pgserver_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/pgserver"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestStartQueryClose(t *testing.T) {
	s, err := pgserver.Start(pgserver.Options{})
	if errors.Is(err, pgserver.ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || !strings.Contains(s.DSN(), s.Addr()) {
		t.Fatalf("addr %q dsn %q", s.Addr(), s.DSN())
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("no psql to query with:", err)
	}
	out, err := exec.Command(psql, s.DSN(), "-tAc", "SELECT 40 + 2").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("psql: %v: %s", err, out)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(psql, s.DSN(), "-tAc", "SELECT 1").CombinedOutput(); err == nil {
		t.Fatalf("server still answers after Close: %s", out)
	}
}

func TestMissingBinaries(t *testing.T) {
	if _, err := pgserver.Start(pgserver.Options{BinDir: t.TempDir()}); !errors.Is(err, pgserver.ErrNoBinary) {
		t.Fatalf("err=%v, want ErrNoBinary", err)
	}
}
