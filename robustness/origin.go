package robustness

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Compute is one run of a compute function, as the origin saw it: which
// replica ran it for which request, the origin version it read, and when it
// began and ended on the run's clock.
type Compute struct {
	ID      string
	Key     string
	Replica string
	Req     int64
	Version int64
	Began   time.Duration
	Ended   time.Duration // 0: not ended (the replica died)
	// How it ended: "ok", "failed", "panic", "not-found", "unchanged",
	// "cancelled".
	How string
	// Revalidated is the value an "unchanged" compute vouched for again.
	Revalidated string `json:",omitempty"`
}

// Origin is the source of truth the replicas' compute functions read: a
// versioned register per key, served over loopback HTTP. Every compute
// reads the key's version and is stamped with an ID and its begin and end
// times, so every value a replica answers can be traced to the compute that
// made it.
type Origin struct {
	clock clock
	hist  *History
	srv   *http.Server
	addr  string

	mu       sync.Mutex
	versions map[string]int64
	computes map[string]*Compute
	next     int
	ends     map[string]chan struct{} // by key: see Origin.nextEnd
}

func newOrigin(clk clock, hist *History) (*Origin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	o := &Origin{clock: clk, hist: hist, addr: ln.Addr().String(), versions: map[string]int64{}, computes: map[string]*Compute{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /begin", o.begin)
	mux.HandleFunc("GET /end", o.end)
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// URL is the origin's base URL.
func (o *Origin) URL() string { return "http://" + o.addr }

// Close stops serving.
func (o *Origin) Close() error { return o.srv.Close() }

// Write moves key's version on, as an update of the source of truth does.
func (o *Origin) Write(key string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.versions[key]++
	return o.versions[key]
}

func (o *Origin) begin(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req int64
	fmt.Sscan(q.Get("req"), &req)
	o.mu.Lock()
	o.next++
	c := &Compute{ID: fmt.Sprintf("c%d", o.next), Key: q.Get("key"), Replica: q.Get("replica"), Req: req,
		Version: o.versions[q.Get("key")], Began: o.clock.now()}
	o.computes[c.ID] = c
	o.mu.Unlock()
	o.hist.mu.Lock()
	o.hist.Computes = append(o.hist.Computes, c)
	o.hist.mu.Unlock()
	_ = json.NewEncoder(w).Encode(struct {
		ID      string
		Version int64
	}{c.ID, c.Version})
}

func (o *Origin) end(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := o.clock.now()
	o.hist.mu.Lock() // the history's lock guards the Compute records
	defer o.hist.mu.Unlock()
	o.mu.Lock()
	c := o.computes[q.Get("id")]
	o.mu.Unlock()
	if c == nil {
		http.Error(w, "unknown compute", http.StatusNotFound)
		return
	}
	c.Ended, c.How, c.Revalidated = now, q.Get("how"), q.Get("revalidated")
	o.mu.Lock()
	if ch := o.ends[c.Key]; ch != nil {
		close(ch)
		delete(o.ends, c.Key)
	}
	o.mu.Unlock()
}

// nextEnd returns a channel closed when the next compute of key ends, as
// the origin hears it: a round that must act between a compute's end and
// its value's fill waits on it.
func (o *Origin) nextEnd(key string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ends == nil {
		o.ends = map[string]chan struct{}{}
	}
	ch := o.ends[key]
	if ch == nil {
		ch = make(chan struct{})
		o.ends[key] = ch
	}
	return ch
}
