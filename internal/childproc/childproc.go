// Package childproc runs a server (redis-server, postgres) as a child
// process for tests, examples and the bench: it dies with its parent, its
// output is kept for error messages, and it is waited for. It also finds
// free loopback ports for such servers.
package childproc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Proc is a started child process. It is safe for concurrent use.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs lockedBuffer
}

// lockedBuffer is the child's output: written by os/exec's copying
// goroutine, read by whoever reports an error.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start starts cmd with its output captured, to die with this process.
func Start(cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	setDeathSignal(cmd)
	cmd.Stdout, cmd.Stderr = &p.logs, &p.logs
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("childproc: start %s: %w", cmd.Path, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// WaitReady calls ready until it returns nil. When the process exits first,
// or timeout passes (then it kills the process), it returns an error with
// the process's output.
func (p *Proc) WaitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("childproc: %s exited at start: %s", p.cmd.Path, p.Logs())
		default:
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.Stop(0)
			return fmt.Errorf("childproc: %s not ready within %s: %w: %s", p.cmd.Path, timeout, err, p.Logs())
		}
		time.Sleep(10 * time.Millisecond) // polling for a child process to come up: no event to wait on
	}
}

// Stop ends the process and waits for it to exit: with SIGINT and up to
// grace for it to exit on its own, then (or at once, when grace is 0) with
// SIGKILL, as a crash would.
func (p *Proc) Stop(grace time.Duration) {
	if grace > 0 {
		_ = p.cmd.Process.Signal(os.Interrupt)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Signal sends sig to the process (SIGSTOP and SIGCONT pause and resume
// it, as a long GC pause or a stalled VM would).
func (p *Proc) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("childproc: signal %s: %w", sig, err)
	}
	return nil
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Logs returns what the process printed so far.
func (p *Proc) Logs() string { return strings.TrimSpace(p.logs.String()) }

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago,
// drawn below the kernel's ephemeral range (32768 and up on Linux, 49152
// and up elsewhere): the kernel never gives such a port to an outgoing
// connection, so a server stopped and started again on its port (a
// restart, a fault) does not find it taken by some client's socket
// meanwhile, as a port the kernel drew for a listener can be on a busy
// machine.
func FreePort() (int, error) {
	l, err := ListenLow()
	if err != nil {
		return 0, fmt.Errorf("childproc: free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

// ListenLow listens on a free TCP port of 127.0.0.1 drawn below the
// kernel's ephemeral range (see FreePort): for a listener that closes and
// listens again on its address (a server that refuses connections for a
// while), which no client's socket can take meanwhile.
func ListenLow() (net.Listener, error) {
	var err error
	for range 100 {
		port := lowPortFrom + rand.IntN(lowPortTo-lowPortFrom)
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return l, nil
		}
	}
	return nil, err
}

// FreePort draws from [lowPortFrom, lowPortTo).
const lowPortFrom, lowPortTo = 20000, 32768

// OnFreePort calls start with free loopback ports until it succeeds, up to
// 5 times: a free port can be taken between the probe and the bind.
func OnFreePort(start func(port int) error) error {
	var err error
	for range 5 {
		var port int
		if port, err = FreePort(); err != nil {
			continue
		}
		if err = start(port); err == nil {
			return nil
		}
	}
	return err
}
