package robustness

// A holder of the lock workload: one lockreplica process, its
// configuration sent on its standard input, its reports read from its
// output, and its pauses (SIGSTOP, SIGCONT) and stop.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/stampede-go/stampede/robustness/lockreplica/lockwire"
)

// lockHolder is one holder process.
type lockHolder struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan struct{}

	mu      sync.Mutex
	reports []lockwire.Report
	logs    bytes.Buffer
	paused  bool
	holding int64 // the fence of the lease it holds now, 0 if none
}

func startHolder(bin string, cfg lockwire.Config) (*lockHolder, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	h := &lockHolder{name: cfg.Holder, done: make(chan struct{})}
	h.cmd = exec.Command(bin, string(b))
	h.cmd.Stderr = &syncWriter{mu: &h.mu, w: &h.logs}
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder %s: %w", cfg.Holder, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r lockwire.Report
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			h.mu.Lock()
			if r.Holding {
				h.holding = r.Fence
			} else {
				h.reports = append(h.reports, r)
				h.holding = 0
			}
			h.mu.Unlock()
		}
		_ = h.cmd.Wait()
		close(h.done)
	}()
	return h, nil
}

func (h *lockHolder) signal(sig syscall.Signal, paused bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = paused
	return h.cmd.Process.Signal(sig)
}

// stop closes the holder's input (it gives up what it is doing, releases
// and exits), and kills it if it has not exited within grace.
func (h *lockHolder) stop(grace time.Duration) {
	h.mu.Lock()
	paused := h.paused
	h.mu.Unlock()
	if paused {
		_ = h.signal(syscall.SIGCONT, false)
	}
	_ = h.in.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}
