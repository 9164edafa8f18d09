package robustness

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stampede-go/stampede/robustness/wire"
)

// clock is the one clock of a run: every invoke, return, compute begin and
// end, and nemesis event is read from the machine's clock, which the suite
// and the replicas share, so that they compare. Times are offsets from the
// run's start.
type clock struct{ start int64 } // Unix nanoseconds

func (c clock) now() time.Duration { return c.at(time.Now().UnixNano()) }

// at is the run's time of a Unix-nanosecond reading.
func (c clock) at(unixNano int64) time.Duration { return time.Duration(unixNano - c.start) }

// Op is one operation of the history: what was asked of which replica, when,
// and what it answered. An operation whose replica was killed before it
// answered has no Return (Unknown): it may or may not have taken effect.
type Op struct {
	Replica string
	Req     wire.Request
	Invoke  time.Duration
	Return  time.Duration
	Unknown bool `json:",omitempty"`
	// Paused says the replica was paused (SIGSTOP) at some point while the
	// operation ran, so its return time says nothing about the library.
	Paused bool `json:",omitempty"`
	Resp   wire.Response
	// Arrived, for an HTTP request, is when the replica's server handed
	// each attempt of it to the cache middleware (Go's transport sends a
	// GET again when its connection dropped); empty when unknown.
	Arrived []time.Duration `json:",omitempty"`
}

// Ok reports whether the operation returned without an error.
func (o *Op) Ok() bool { return !o.Unknown && o.Resp.Err == "" }

func (o *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s", o.Req.ID, o.Replica, o.Req.Op)
	if o.Req.Key != "" {
		fmt.Fprintf(&b, " %s", o.Req.Key)
	}
	if len(o.Req.Keys) > 0 {
		fmt.Fprintf(&b, " %v", o.Req.Keys)
	}
	if len(o.Req.Tags) > 0 {
		fmt.Fprintf(&b, " tags=%v", o.Req.Tags)
	}
	fmt.Fprintf(&b, " [%s, ", ms(o.Invoke))
	if o.Unknown {
		b.WriteString("?]")
	} else {
		fmt.Fprintf(&b, "%s]", ms(o.Return))
	}
	if o.Resp.Value != nil {
		fmt.Fprintf(&b, " -> %s", o.Resp.Value.ID)
	}
	for k, v := range o.Resp.Values {
		fmt.Fprintf(&b, " %s->%s", k, v.ID)
	}
	if o.Resp.Outcome != "" {
		fmt.Fprintf(&b, " (%s)", o.Resp.Outcome)
	}
	if o.Resp.ResultErr != "" {
		fmt.Fprintf(&b, " result-err=%s", o.Resp.ResultErr)
	}
	if o.Resp.Err != "" {
		fmt.Fprintf(&b, " err=%s: %s", o.Resp.Err, o.Resp.ErrText)
	}
	for k, e := range o.Resp.KeyErrs {
		fmt.Fprintf(&b, " %s:err=%s", k, e)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// Event is a nemesis' action, on the run's clock.
type Event struct {
	At   time.Duration
	What string
	// Heal says the fault ended (the run is healthy again once every fault
	// has healed).
	Heal bool `json:",omitempty"`
}

// History is everything a run recorded.
type History struct {
	mu       sync.Mutex
	Scenario string
	Seed     int64
	Ops      []*Op
	Computes []*Compute
	Events   []Event
	// End is when the traffic stopped.
	End time.Duration
	// Crashes are the replica processes that exited by themselves, each
	// with the end of its standard error.
	Crashes []string `json:",omitempty"`
	// Logs are what each replica process wrote to its standard error
	// (the library's warnings), by replica.
	Logs map[string]string `json:"-"`
}

func (h *History) addOp(o *Op) {
	h.mu.Lock()
	h.Ops = append(h.Ops, o)
	h.mu.Unlock()
}

func (h *History) event(at time.Duration, what string, heal bool) {
	h.mu.Lock()
	h.Events = append(h.Events, Event{At: at, What: what, Heal: heal})
	h.mu.Unlock()
}

// sorted orders the operations by invoke time.
func (h *History) sorted() {
	sort.Slice(h.Ops, func(i, j int) bool { return h.Ops[i].Invoke < h.Ops[j].Invoke })
	sort.Slice(h.Events, func(i, j int) bool { return h.Events[i].At < h.Events[j].At })
}

// Save writes the history as JSON to path.
func (h *History) Save(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadHistory reads a history that [History.Save] wrote.
func LoadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := &History{}
	if err := json.Unmarshal(b, h); err != nil {
		return nil, fmt.Errorf("robustness: %s: %w", path, err)
	}
	return h, nil
}
