package main

// The live progress line of a run: what runs, for how long, and how many
// requests it has made.

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// progress prints a live line: what runs, for how long, how many requests.
type progress struct {
	w    io.Writer
	live bool // rewrite the line in place (a terminal); else one line per run
	stop func()
}

func (p *progress) start(name string, started time.Time, total time.Duration, requests *atomic.Int64) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				if !p.live {
					fmt.Fprintf(p.w, "%-44s %5.1fs/%gs  %9d requests\n", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
					return
				}
				fmt.Fprintf(p.w, "\r%-44s %5.1fs/%gs  %9d requests\n", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
				return
			case <-t.C:
				if p.live {
					fmt.Fprintf(p.w, "\r%-44s %5.1fs/%gs  %9d requests", name, time.Since(started).Seconds(), total.Seconds(), requests.Load())
				}
			}
		}
	}()
	p.stop = func() { close(done); <-finished }
}
