// Package redisserver starts a real redis-server child process on a free
// loopback port, without persistence, and stops it. Tests, examples and the
// benchmark harness use it so that everything runs against the real server.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-go/stampede/internal/childproc"
)

// ErrNoBinary is returned by [Start] when no redis-server binary is found.
var ErrNoBinary = errors.New("redisserver: redis-server binary not found on PATH (install Debian's redis-server package)")

// Options configures [Start]. The zero value starts a plain server without
// persistence.
type Options struct {
	// Binary is the redis-server executable. Default: "redis-server" from PATH,
	// or $REDIS_SERVER_BIN when set.
	Binary string
	// Args are extra configuration arguments, e.g. {"--appendonly", "yes"}.
	Args []string
	// StartTimeout bounds how long Start waits for the server to answer PING.
	// Default: 10s.
	StartTimeout time.Duration
}

// Server is a running redis-server child process. It is safe for concurrent use.
type Server struct {
	bin  string
	opts Options
	dir  string
	port int

	// sentinelConf, when set, makes this a Sentinel run from that file.
	sentinelConf string

	mu   sync.Mutex
	proc *childproc.Proc // nil while stopped
}

// LookPath resolves bin, or $REDIS_SERVER_BIN, or "redis-server", on PATH.
func LookPath(bin string) (string, error) {
	if bin == "" {
		bin = os.Getenv("REDIS_SERVER_BIN")
	}
	if bin == "" {
		bin = "redis-server"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
	}
	return p, nil
}

// Start launches redis-server on a free port of 127.0.0.1 and waits until it
// answers PING.
func Start(opts Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	return s.startOnFreePort()
}

// startOnFreePort starts s on a free loopback port; on failure it removes
// s's working directory.
func (s *Server) startOnFreePort() (*Server, error) {
	err := childproc.OnFreePort(func(port int) error {
		s.port = port
		return s.start()
	})
	if err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

// newServer resolves the binary and makes the working directory.
func newServer(opts Options) (*Server, error) {
	bin, err := LookPath(opts.Binary)
	if err != nil {
		return nil, err
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 10 * time.Second
	}
	dir, err := os.MkdirTemp("", "stampede-redis-*")
	if err != nil {
		return nil, fmt.Errorf("redisserver: temp dir: %w", err)
	}
	return &Server{bin: bin, opts: opts, dir: dir}, nil
}

// Addr is the server's host:port on the loopback interface.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Version returns the server's version string, e.g. "7.0.15".
func (s *Server) Version() string {
	out, err := exec.Command(s.bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	}
	if s.sentinelConf != "" {
		args = append([]string{s.sentinelConf, "--sentinel"}, args...)
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, s.opts.Args...)
	proc, err := childproc.Start(exec.Command(s.bin, args...))
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	if err := proc.WaitReady(s.opts.StartTimeout, func() error { return ping(s.Addr()) }); err != nil {
		return fmt.Errorf("redisserver: %s on %s: %w", s.bin, s.Addr(), err)
	}
	s.mu.Lock()
	s.proc = proc
	s.mu.Unlock()
	return nil
}

// Stop terminates the server (SIGKILL, as a crash would) and waits for it to
// exit. Data not persisted is lost. [Server.Restart] brings it back on the same port.
func (s *Server) Stop() error {
	s.mu.Lock()
	proc := s.proc
	s.proc = nil
	s.mu.Unlock()
	if proc != nil {
		proc.Stop(0)
	}
	return nil
}

// Pause stops the server's process with SIGSTOP: connections stay open and
// nothing is answered until [Server.Resume], as in a long stall.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a server paused by [Server.Pause].
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("redisserver: %s is stopped", s.Addr())
	}
	return proc.Signal(sig)
}

// Running reports whether the server process runs (it was not stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Restart stops the server if it runs and starts it again on the same port
// with the same options.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	var err error
	for range 20 { // the port may linger briefly after a kill
		if err = s.start(); err == nil {
			return nil
		}
	}
	return err
}

// Close stops the server and removes its working directory.
func (s *Server) Close() error {
	err := s.Stop()
	return errors.Join(err, os.RemoveAll(s.dir))
}

func ping(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redisserver: unexpected reply %q", line)
	}
	return nil
}
