package robustness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// buildReplica builds the replica program into dir, with the race detector
// when this test binary has it.
func buildReplica(dir string) (string, error) {
	bin := filepath.Join(dir, "replica")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "github.com/stampede-go/stampede/robustness/replica")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build replica: %w: %s", err, out)
	}
	return bin, nil
}

// Replica is one replica process, driven through its standard input and
// output. It is safe for concurrent use.
type Replica struct {
	Name string
	bin  string
	cfg  wire.Config

	mu      sync.Mutex
	cmd     *exec.Cmd
	in      io.WriteCloser
	pending map[int64]chan wire.Response
	dead    chan struct{} // closed when the current process has exited
	logs    bytes.Buffer  // every incarnation's standard error
	paused  bool
	// ending says the suite is ending the current process (Kill, Close);
	// crashed is how a process it was not ending exited (see Crashed).
	ending  bool
	crashed []string
	// quiet, while not nil, holds the suite's callers of this replica
	// back (the replica-idle nemesis); closed when they may go on.
	quiet chan struct{}
	// sparse, while above 0, spaces this replica's operations at least
	// that far apart, over all its callers (the replica-sparse nemesis);
	// nextAt is when the next may go.
	sparse time.Duration
	nextAt time.Time
}

// Quiet holds this replica's callers back before their next operation
// until Resume: the process runs on, and only its traffic stops.
func (r *Replica) Quiet() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.quiet == nil {
		r.quiet = make(chan struct{})
	}
}

// Unquiet lets the callers Quiet held back go on.
func (r *Replica) Unquiet() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.quiet != nil {
		close(r.quiet)
		r.quiet = nil
	}
}

// Sparse spaces this replica's operations at least every apart, over all
// its callers, until Dense: its traffic goes on, seldom.
func (r *Replica) Sparse(every time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sparse = every
}

// Dense lets the replica's callers go on at their own pace again.
func (r *Replica) Dense() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sparse = 0
}

// idle reports whether the replica-idle nemesis keeps the replica's
// callers back now.
func (r *Replica) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.quiet != nil
}

// waitActive returns once the replica's callers may send: at once, when
// Unquiet lets them go on, or, while the replica is sparse, when its turn
// comes.
func (r *Replica) waitActive() {
	r.mu.Lock()
	q := r.quiet
	var wait time.Duration
	if r.sparse > 0 {
		now := time.Now()
		at := now
		if r.nextAt.After(now) {
			at = r.nextAt
		}
		r.nextAt = at.Add(r.sparse)
		wait = at.Sub(now)
	}
	r.mu.Unlock()
	if q != nil {
		<-q
	}
	if wait > 0 {
		time.Sleep(wait) // the sparse traffic's schedule, not a wait for an event
	}
}

func startReplica(bin string, cfg wire.Config) (*Replica, error) {
	r := &Replica{Name: cfg.Replica, bin: bin, cfg: cfg}
	if err := r.start(); err != nil {
		return nil, err
	}
	return r, nil
}

// start runs a new incarnation of the replica.
func (r *Replica) start() error {
	b, err := json.Marshal(r.cfg)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin, string(b))
	cmd.Stderr = &syncWriter{mu: &r.mu, w: &r.logs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start replica %s: %w", r.Name, err)
	}
	dead := make(chan struct{})
	r.mu.Lock()
	r.cmd, r.in, r.dead, r.paused, r.ending = cmd, in, dead, false, false
	r.pending = map[int64]chan wire.Response{}
	pending := r.pending
	r.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var resp wire.Response
			if json.Unmarshal(sc.Bytes(), &resp) != nil {
				continue
			}
			r.mu.Lock()
			ch := pending[resp.ID]
			delete(pending, resp.ID)
			r.mu.Unlock()
			if ch != nil {
				ch <- resp
			}
		}
		err := cmd.Wait()
		r.mu.Lock()
		if !r.ending {
			r.crashed = append(r.crashed, fmt.Sprintf("%s exited by itself (%v); its standard error ends:\n%s", r.Name, err, tail(r.logs.String(), 20)))
		}
		r.mu.Unlock()
		close(dead)
	}()
	return nil
}

// syncWriter serialises writes to w under mu.
type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Do sends req and waits for the answer. ok is false when the process died
// first, or did not answer within limit (then the operation's outcome is
// unknown).
func (r *Replica) Do(req wire.Request, limit time.Duration) (resp wire.Response, ok bool) {
	line, err := json.Marshal(req)
	if err != nil {
		panic(err) // a Request always encodes
	}
	ch := make(chan wire.Response, 1)
	r.mu.Lock()
	in, dead, pending := r.in, r.dead, r.pending
	pending[req.ID] = ch
	r.mu.Unlock()
	if _, err := in.Write(append(line, '\n')); err != nil {
		return resp, false
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case resp = <-ch:
		return resp, true
	case <-dead:
		return resp, false
	case <-t.C:
		return resp, false
	}
}

// Kill kills the process (SIGKILL) and waits for it to exit: its operations
// in flight never answer.
func (r *Replica) Kill() {
	r.mu.Lock()
	cmd, dead := r.cmd, r.dead
	r.ending = true
	r.mu.Unlock()
	_ = cmd.Process.Kill()
	<-dead
}

// Crashed returns how the replica's processes that the suite did not end
// exited: a panic in the library, or in the replica, kills the process.
func (r *Replica) Crashed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.crashed)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Restart starts a new incarnation after Kill: an empty process, as a
// restarted pod is.
func (r *Replica) Restart() error { return r.start() }

// Pause stops the process (SIGSTOP), as a long GC pause or a stalled VM does.
func (r *Replica) Pause() error { return r.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process (SIGCONT).
func (r *Replica) Resume() error { return r.signal(syscall.SIGCONT, false) }

func (r *Replica) signal(sig syscall.Signal, paused bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = paused
	return r.cmd.Process.Signal(sig)
}

// Close ends the process: it finishes what runs and stops when its input
// closes; it is killed if it has not within grace.
func (r *Replica) Close(grace time.Duration) {
	r.mu.Lock()
	in, dead, cmd, paused := r.in, r.dead, r.cmd, r.paused
	r.ending = true
	r.mu.Unlock()
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = in.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-dead:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-dead
	}
}

// Logs is what every incarnation wrote to its standard error.
func (r *Replica) Logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logs.String()
}
