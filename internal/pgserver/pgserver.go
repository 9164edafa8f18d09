// Package pgserver starts a private PostgreSQL cluster for tests and
// examples: initdb into a temporary directory, then postgres on a free
// loopback port, stopped and removed by Close. As root it runs both as the
// "postgres" system user (PostgreSQL refuses to run as root), which owns
// the directory.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/stampede-go/stampede/internal/childproc"
)

// ErrNoBinary is returned by [Start] when no PostgreSQL server binaries are found.
var ErrNoBinary = errors.New("pgserver: PostgreSQL binaries (initdb, postgres, pg_isready) not found (install Debian's postgresql package)")

// Options configures [Start]. The zero value is valid.
type Options struct {
	// BinDir holds initdb, postgres and pg_isready. Default: $PG_BIN_DIR,
	// else the newest /usr/lib/postgresql/<version>/bin (Debian's layout),
	// else the directory of initdb on PATH.
	BinDir string
	// StartTimeout bounds initdb and the server's start. Default: 60s.
	StartTimeout time.Duration
}

// Server is a running PostgreSQL cluster of its own. It is safe for
// concurrent use.
type Server struct {
	dir  string
	port int

	mu   sync.Mutex
	proc *childproc.Proc // nil while stopped
}

// FindBinDir returns the directory of the PostgreSQL server binaries (see
// [Options].BinDir).
func FindBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("PG_BIN_DIR")
	}
	if dir == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
		if len(found) > 0 {
			dir = found[0]
		}
	}
	if dir == "" {
		if p, err := exec.LookPath("initdb"); err == nil {
			dir = filepath.Dir(p)
		}
	}
	for _, bin := range []string{"initdb", "postgres", "pg_isready"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); dir == "" || err != nil {
			return "", fmt.Errorf("%w: no %s in %q", ErrNoBinary, bin, dir)
		}
	}
	return dir, nil
}

// version returns the major version in a path /usr/lib/postgresql/<v>/bin.
func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start creates a cluster in a temporary directory and starts it on a free
// port of 127.0.0.1, with trust authentication for the user "postgres" and
// fsync off (test data is thrown away).
func Start(opts Options) (*Server, error) {
	bin, err := FindBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 60 * time.Second
	}
	owner, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "stampede-pg-*")
	if err != nil {
		return nil, fmt.Errorf("pgserver: temp dir: %w", err)
	}
	s := &Server{dir: dir}
	if err := s.setUp(bin, owner, opts.StartTimeout); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// runAs returns the user to run PostgreSQL as: nil for the current one, or
// the "postgres" system user when running as root.
func runAs() (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root needs the postgres system user (Debian's postgresql package creates it): %w", err)
	}
	return u, nil
}

func (s *Server) setUp(bin string, owner *user.User, timeout time.Duration) error {
	if owner != nil {
		if err := chown(s.dir, owner); err != nil {
			return err
		}
	}
	data := filepath.Join(s.dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.Dir = s.dir // the postgres user may not read the caller's directory
	if err := runAsOwner(initdb, owner); err != nil {
		return err
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("pgserver: initdb: %w: %s", err, out)
	}
	return childproc.OnFreePort(func(port int) error {
		s.port = port
		return s.start(bin, data, owner, timeout)
	})
}

func (s *Server) start(bin, data string, owner *user.User, timeout time.Duration) error {
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "synchronous_commit=off", "-c", "max_connections=50")
	cmd.Dir = s.dir
	if err := runAsOwner(cmd, owner); err != nil {
		return err
	}
	proc, err := childproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	isReady := func() error {
		return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres", "-t", "1").Run()
	}
	if err := proc.WaitReady(timeout, isReady); err != nil {
		return fmt.Errorf("pgserver: postgres on %s: %w", s.Addr(), err)
	}
	s.mu.Lock()
	s.proc = proc
	s.mu.Unlock()
	return nil
}

// Addr is the server's host:port on the loopback interface.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// DSN is a connection URL for the database "postgres" as the user
// "postgres" (trust authentication, no TLS).
func (s *Server) DSN() string {
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// stop shuts the server down (fast shutdown, SIGKILL after 10s) and waits
// for it to exit.
func (s *Server) stop() {
	s.mu.Lock()
	proc := s.proc
	s.proc = nil
	s.mu.Unlock()
	if proc != nil {
		proc.Stop(10 * time.Second)
	}
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	s.stop()
	return os.RemoveAll(s.dir)
}

func chown(dir string, u *user.User) error {
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("pgserver: user %s: %w", u.Username, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pgserver: chown %s: %w", dir, err)
	}
	return nil
}
