package main

// Scenario "fleet" (issue 38): what a fleet of replicas costs Redis, idle
// and under load, as the fleet grows. R simulated replicas, each with its
// own go-redis client (a small pool) and N cache.Cache[string] with the
// default options (L1 on), first idle, then under a bounded Zipf load with
// 10 % writes spread over the replicas; on the bench's Redis and on a
// 3-master Cluster started the way the tests start one. Every figure is
// read from Redis' own counters (INFO commandstats, cpu, stats, clients):
// what the fleet costs Redis, whatever the process running it can do.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redisserver"
)

// fleetConfig is the fleet scenario's configuration (the -fleet-* flags).
type fleetConfig struct {
	replicas   []int         // R: fleet sizes
	caches     []int         // N: caches per replica
	topologies []string      // "single" (the bench's Redis), "cluster" (3 masters of its own)
	runs       int           // runs per shape; the table shows their median and min–max
	window     time.Duration // each measured window (idle, then load)
	rate       int           // requests a second over the whole fleet, under load
	keys       int           // Zipf keys per cache
	writeShare float64       // share of requests that are Sets
	pool       int           // go-redis PoolSize of every replica's client (pipelines share it)
	writeFleet int           // replicas of the write-cost measurement (0: none)
	writes     int           // Sets timed by the write-cost measurement
	before     string        // a results.json whose fleet figures the table shows beside this run's
	l1Off      bool          // L1Size -1 on every cache (default options otherwise)
}

// fleetIdleStop is how long after its last request a cache's heartbeat
// stops at the default InvalidationWait (δ = 100 ms): max(3 s, 4δ)
// (docs/how-it-works.md, "Demand-driven"). The idle window starts that
// long, and a second more, after the last cache's one call.
const fleetIdleStop = 3*time.Second + time.Second

// fleetValue is the value every request stores: 100 bytes.
var fleetValue = strings.Repeat("v", 100)

// FleetSample is what one Redis node did over one measured window.
type FleetSample struct {
	Node        string  `json:"node"`
	CmdsPerSec  float64 `json:"commands_per_sec"`   // INFO commandstats calls, INFO itself left out
	CPUPercent  float64 `json:"cpu_percent"`        // used_cpu_sys+used_cpu_user over the window, % of one core
	BytesPerSec float64 `json:"bytes_sent_per_sec"` // total_net_output_bytes, the bench's own INFO replies left out
	Clients     int64   `json:"connected_clients"`  // at the window's end, the bench's own connection left out
	MaxClients  int64   `json:"maxclients"`         // the node's maxclients: connections past it are refused
	// ByCommand is CmdsPerSec by command (commands run inside scripts
	// count too, as INFO commandstats counts them).
	ByCommand map[string]float64 `json:"commands_per_sec_by_command,omitempty"`
}

// FleetRun is one measured window of one run: the fleet's requests and
// what each Redis node did.
type FleetRun struct {
	ReqPerSec float64 `json:"requests_per_sec"`
	// FetchPerSec are the requests that were Fetches (the rest: Sets).
	FetchPerSec float64       `json:"fetches_per_sec"`
	Errors      int64         `json:"errors"`
	Nodes       []FleetSample `json:"nodes"` // one per master; one for a single Redis
	// OriginCalls and KeysComputed are over the whole load (its first
	// second too), every replica together: how many times a Fetch's
	// compute ran, and on how many distinct keys (a key is one per cache
	// index, shared by every replica). Keys never expire within a run
	// (TTL 1 minute) and are never deleted, so each key's value is missing
	// once: OriginCalls/KeysComputed is 1.00 when one compute served the
	// whole fleet for each.
	OriginCalls  int64 `json:"origin_calls,omitempty"`
	KeysComputed int64 `json:"keys_computed,omitempty"`
}

// fleetOrigin counts a fleet's computes per key (cache index and key).
type fleetOrigin struct {
	mu    sync.Mutex
	calls map[string]int64
}

// fetch is the compute of cache index n's key: it counts and answers.
func (o *fleetOrigin) fetch(n int, key string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		o.mu.Lock()
		if o.calls == nil {
			o.calls = map[string]int64{}
		}
		o.calls[strconv.Itoa(n)+"/"+key]++
		o.mu.Unlock()
		return fleetValue, nil
	}
}

// totals are the computes and the distinct keys they were for.
func (o *fleetOrigin) totals() (calls, keys int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.calls {
		calls += c
	}
	return calls, int64(len(o.calls))
}

// total sums the nodes of a run.
func (r FleetRun) total() FleetSample {
	var t FleetSample
	for _, n := range r.Nodes {
		t.CmdsPerSec += n.CmdsPerSec
		t.CPUPercent += n.CPUPercent
		t.BytesPerSec += n.BytesPerSec
		t.Clients += n.Clients
		for c, v := range n.ByCommand {
			if t.ByCommand == nil {
				t.ByCommand = map[string]float64{}
			}
			t.ByCommand[c] += v
		}
	}
	return t
}

// FleetResult is one shape (topology, R, N, phase) over its runs.
type FleetResult struct {
	Topology string     `json:"topology"`
	Replicas int        `json:"replicas"`
	Caches   int        `json:"caches_per_replica"`
	Phase    string     `json:"phase"` // idle or load
	Runs     []FleetRun `json:"runs"`
}

// FleetWrite is the write cost: bytes Redis sends for one Set on a key
// that one replica holds, in a fleet of Replicas (one cache each), per run.
type FleetWrite struct {
	Topology    string    `json:"topology"`
	Replicas    int       `json:"replicas"`
	BytesPerSet []float64 `json:"bytes_sent_per_set"`
}

// FleetReport is the fleet scenario's figures.
type FleetReport struct {
	Config  string        `json:"config"`
	Results []FleetResult `json:"results"`
	Writes  []FleetWrite  `json:"writes,omitempty"`
}

// fleetTarget is a Redis to run a fleet on: how to make a replica's
// client, and the admin clients of its nodes (masters), in a fixed order.
type fleetTarget struct {
	name      string
	newClient func(pool int) redis.UniversalClient
	nodes     []*redis.Client
	close     func()
}

// runFleet runs every shape of the fleet scenario on every topology and
// returns the figures. single is the bench's Redis.
func runFleet(ctx context.Context, fc fleetConfig, single *redis.Options, p *progress) (*FleetReport, error) {
	if err := raiseFileLimit(); err != nil {
		return nil, err
	}
	rep := &FleetReport{Config: fc.describe()}
	for _, topo := range fc.topologies {
		target, err := openFleetTarget(topo, single)
		if err != nil {
			return nil, err
		}
		err = runFleetOn(ctx, fc, target, rep, p)
		target.close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", topo, err)
		}
	}
	return rep, nil
}

// runFleetOn runs every shape fc.runs times on t, then the write cost,
// adding the figures to rep.
func runFleetOn(ctx context.Context, fc fleetConfig, t *fleetTarget, rep *FleetReport, p *progress) error {
	for _, r := range fc.replicas {
		for _, n := range fc.caches {
			idle := FleetResult{Topology: t.name, Replicas: r, Caches: n, Phase: "idle"}
			load := FleetResult{Topology: t.name, Replicas: r, Caches: n, Phase: "load"}
			for run := range fc.runs {
				var reqs atomic.Int64
				p.start(fmt.Sprintf("fleet %s %dx%d run %d/%d", t.name, r, n, run+1, fc.runs), time.Now(),
					fleetIdleStop+2*fc.window+time.Second, &reqs)
				i, l, err := fleetRun(ctx, fc, t, r, n, &reqs)
				p.stop()
				if err != nil {
					return fmt.Errorf("%d replicas × %d caches: %w", r, n, err)
				}
				idle.Runs, load.Runs = append(idle.Runs, i), append(load.Runs, l)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			rep.Results = append(rep.Results, idle, load)
		}
	}
	if fc.writeFleet > 0 {
		w := FleetWrite{Topology: t.name, Replicas: fc.writeFleet}
		for range fc.runs {
			b, err := fleetWriteCost(ctx, fc, t)
			if err != nil {
				return fmt.Errorf("write cost at %d replicas: %w", fc.writeFleet, err)
			}
			w.BytesPerSet = append(w.BytesPerSet, b)
		}
		rep.Writes = append(rep.Writes, w)
	}
	return nil
}

// openFleetTarget returns the single Redis (the bench's) or a 3-master
// Cluster of the scenario's own, started as the tests start theirs.
func openFleetTarget(topo string, single *redis.Options) (*fleetTarget, error) {
	switch topo {
	case "single":
		admin := redis.NewClient(single)
		return &fleetTarget{
			name: topo,
			newClient: func(pool int) redis.UniversalClient {
				o := *single
				// go-redis (v9.23) also keeps a pool of its own for
				// pipelines, 10 connections by default, which the cache's
				// pipelines (the claim, the marks' read) would open beside
				// the main pool: -1 runs them on the main pool, so that a
				// replica holds at most PoolSize connections besides its
				// subscriptions.
				o.PoolSize, o.PipelinePoolSize = pool, -1
				return redis.NewClient(&o)
			},
			nodes: []*redis.Client{admin},
			close: func() { _ = admin.Close() },
		}, nil
	case "cluster":
		c, err := redisserver.StartCluster(3, 0)
		if err != nil {
			return nil, fmt.Errorf("starting a 3-master Cluster: %w", err)
		}
		addrs := c.Addrs()
		t := &fleetTarget{
			name: topo,
			newClient: func(pool int) redis.UniversalClient {
				return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: pool})
			},
		}
		for _, a := range addrs {
			t.nodes = append(t.nodes, redis.NewClient(&redis.Options{Addr: a}))
		}
		t.close = func() {
			for _, n := range t.nodes {
				_ = n.Close()
			}
			_ = c.Close()
		}
		return t, nil
	}
	return nil, fmt.Errorf("unknown fleet topology %q: single or cluster", topo)
}

var fleetSeq atomic.Int64

// fleet is R replicas × N caches: caches[r][n] is replica r's cache n.
type fleet struct {
	clients []redis.UniversalClient
	caches  [][]*cache.Cache[string]
}

// newFleet builds r replicas (each its own client) × n caches, each cache
// with the default options but the namespace and a silent logger (and L1
// off when l1Off).
func newFleet(t *fleetTarget, r, n, pool int, l1Off bool) (*fleet, error) {
	// One namespace per cache index, shared by every replica; new for each
	// fleet, so that every run starts cold.
	prefix := fmt.Sprintf("fleet%d-%d", time.Now().UnixNano()%1e6, fleetSeq.Add(1))
	f := &fleet{}
	for range r {
		rdb := t.newClient(pool)
		f.clients = append(f.clients, rdb)
		var cs []*cache.Cache[string]
		for i := range n {
			c, err := cache.New[string](rdb, cache.Options{
				Namespace: fmt.Sprintf("%s.c%d", prefix, i),
				Logger:    slog.New(slog.DiscardHandler),
				L1Size:    l1Size(l1Off),
			})
			if err != nil {
				f.close()
				return nil, err
			}
			cs = append(cs, c)
		}
		f.caches = append(f.caches, cs)
	}
	return f, nil
}

// l1Size is the caches' L1Size: the default (0), or off (-1).
func l1Size(off bool) int {
	if off {
		return -1
	}
	return 0
}

func (f *fleet) close() {
	for _, cs := range f.caches {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	for _, c := range f.clients {
		_ = c.Close()
	}
}

// each calls fn on every cache, 32 at a time; the first error wins.
func (f *fleet) each(ctx context.Context, fn func(ctx context.Context, r, n int, c *cache.Cache[string]) error) error {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for r, cs := range f.caches {
		for n, c := range cs {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := fn(ctx, r, n, c); err != nil {
					once.Do(func() { first = err })
				}
			}()
		}
	}
	wg.Wait()
	return first
}

// fleetRun builds a fleet, makes one call on every cache, waits out the
// heartbeats' idle stop and measures an idle window; then it runs the
// bounded Zipf load for a second unmeasured and a window measured.
func fleetRun(ctx context.Context, fc fleetConfig, t *fleetTarget, r, n int, reqs *atomic.Int64) (idle, load FleetRun, err error) {
	f, err := newFleet(t, r, n, fc.pool, fc.l1Off)
	if err != nil {
		return idle, load, err
	}
	defer f.close()
	if err := f.each(ctx, func(ctx context.Context, _, n int, c *cache.Cache[string]) error {
		_, err := c.Fetch(ctx, "warm", func(context.Context) (string, error) { return fleetValue, nil })
		return err
	}); err != nil {
		return idle, load, fmt.Errorf("first call: %w", err)
	}
	if err := sleepCtx(ctx, fleetIdleStop); err != nil {
		return idle, load, err
	}
	before, err := readNodes(ctx, t.nodes)
	if err != nil {
		return idle, load, err
	}
	if err := sleepCtx(ctx, fc.window); err != nil {
		return idle, load, err
	}
	after, err := readNodes(ctx, t.nodes)
	if err != nil {
		return idle, load, err
	}
	idle = FleetRun{Nodes: rankNodes(nodeDeltas(before, after))}

	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	var done, fetches, errs atomic.Int64
	var origin fleetOrigin
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		fleetLoad(loadCtx, fc, f, &origin, &done, &fetches, &errs, reqs)
	}()
	defer func() { stop(); <-finished }()
	if err := sleepCtx(ctx, time.Second); err != nil { // heartbeats started, L1s filled
		return idle, load, err
	}
	before, err = readNodes(ctx, t.nodes)
	if err != nil {
		return idle, load, err
	}
	d0, f0, e0 := done.Load(), fetches.Load(), errs.Load()
	if err := sleepCtx(ctx, fc.window); err != nil {
		return idle, load, err
	}
	after, err = readNodes(ctx, t.nodes)
	if err != nil {
		return idle, load, err
	}
	d1, f1, e1 := done.Load(), fetches.Load(), errs.Load()
	took := after[0].at.Sub(before[0].at).Seconds()
	load = FleetRun{ReqPerSec: float64(d1-d0) / took, FetchPerSec: float64(f1-f0) / took, Errors: e1 - e0, Nodes: rankNodes(nodeDeltas(before, after))}
	stop()
	<-finished
	load.OriginCalls, load.KeysComputed = origin.totals()
	return idle, load, nil
}

// fleetLoad sends fc.rate requests a second, spread uniformly over the
// replicas and their caches, on Zipf-distributed keys (s = 1.1), a share
// fc.writeShare of them Sets and the rest Fetches, from 64 workers (so at
// most 64 in flight) until ctx ends. A request is scheduled at a fixed
// time; a fleet that falls behind sends fewer, which the achieved rate
// shows.
func fleetLoad(ctx context.Context, fc fleetConfig, f *fleet, origin *fleetOrigin, done, fetches, errs, reqs *atomic.Int64) {
	const workers = 64
	interval := time.Second / time.Duration(fc.rate)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			zipf := rand.NewZipf(rng, 1.1, 1, uint64(fc.keys-1))
			for {
				at := start.Add(time.Duration(next.Add(1)-1) * interval)
				if sleepCtx(ctx, time.Until(at)) != nil {
					return
				}
				c := f.caches[rng.IntN(len(f.caches))]
				n := rng.IntN(len(c))
				cc := c[n]
				key := "k" + strconv.FormatUint(zipf.Uint64(), 10)
				var err error
				write := rng.Float64() < fc.writeShare
				if write {
					err = cc.Set(ctx, key, fleetValue)
				} else {
					_, err = cc.Fetch(ctx, key, origin.fetch(n, key))
				}
				if ctx.Err() != nil {
					return // the window is over: neither counted nor an error
				}
				if !write {
					fetches.Add(1)
				}
				if err != nil {
					errs.Add(1)
				}
				done.Add(1)
				reqs.Add(1)
			}
		}()
	}
	wg.Wait()
}

// fleetWriteCost measures the bytes Redis sends for one Set on a key that
// one replica holds in L1, in a fleet of fc.writeFleet replicas of one
// cache each (every one having made one call, so subscribed): fc.writes
// Sets from another replica, once every heartbeat has stopped, the bytes
// Redis sent over them (every node) divided by their number. Replica 0
// reads the key until L1 answers it (with L1 on).
func fleetWriteCost(ctx context.Context, fc fleetConfig, t *fleetTarget) (float64, error) {
	f, err := newFleet(t, fc.writeFleet, 1, fc.pool, fc.l1Off)
	if err != nil {
		return 0, err
	}
	defer f.close()
	fetch := func(context.Context) (string, error) { return fleetValue, nil }
	if err := f.each(ctx, func(ctx context.Context, r, _ int, c *cache.Cache[string]) error {
		key := "warm"
		if r == 0 {
			key = "held" // replica 0 alone holds the key written
		}
		_, err := c.Fetch(ctx, key, fetch)
		if err != nil || r != 0 || fc.l1Off {
			return err
		}
		return holdInL1(ctx, c, key, fetch)
	}); err != nil {
		return 0, fmt.Errorf("first call: %w", err)
	}
	if err := sleepCtx(ctx, fleetIdleStop); err != nil {
		return 0, err
	}
	writer := f.caches[len(f.caches)-1][0]
	before, err := readNodes(ctx, t.nodes)
	if err != nil {
		return 0, err
	}
	for range fc.writes {
		if err := writer.Set(ctx, "held", fleetValue); err != nil {
			return 0, err
		}
	}
	after, err := readNodes(ctx, t.nodes)
	if err != nil {
		return 0, err
	}
	var sent float64
	for i := range before {
		sent += float64(after[i].outBytes - before[i].outBytes - before[i].infoBytes)
	}
	return sent / float64(fc.writes), nil
}

// holdInL1 reads key on c until L1 answers it: L1 takes a key from a read
// that begins once it subscribed the key's channel, which its second read
// asks for.
func holdInL1(ctx context.Context, c *cache.Cache[string], key string, fetch func(context.Context) (string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		before := c.Stats().L1Hits
		if _, err := c.Fetch(ctx, key, fetch); err != nil {
			return fmt.Errorf("reading %q into L1: %w", key, err)
		}
		if c.Stats().L1Hits > before {
			return nil
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("reading %q into L1: %w", key, err)
		}
	}
}

// nodeReading is one INFO reading of one node.
type nodeReading struct {
	addr       string
	at         time.Time
	calls      int64 // every command but INFO
	byCommand  map[string]int64
	cpu        float64 // used_cpu_sys + used_cpu_user, seconds
	outBytes   int64   // total_net_output_bytes
	clients    int64   // connected_clients
	maxClients int64   // maxclients
	infoBytes  int64   // the size of this INFO reply, which the next reading's outBytes counts
}

func readNodes(ctx context.Context, nodes []*redis.Client) ([]nodeReading, error) {
	out := make([]nodeReading, len(nodes))
	for i, n := range nodes {
		r, err := readNode(ctx, n)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func readNode(ctx context.Context, n *redis.Client) (nodeReading, error) {
	info, err := n.Info(ctx, "commandstats", "cpu", "stats", "clients").Result()
	if err != nil {
		return nodeReading{}, fmt.Errorf("INFO on %s: %w", n.Options().Addr, err)
	}
	r := nodeReading{addr: n.Options().Addr, at: time.Now(), calls: -1, outBytes: -1, clients: -1, byCommand: map[string]int64{},
		// The reply as sent: a bulk string, "$<len>\r\n<info>\r\n".
		infoBytes: int64(len(info) + len(strconv.Itoa(len(info))) + 5)}
	var sys, user float64
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			if k == "cmdstat_info" {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			if c, err := strconv.ParseInt(calls, 10, 64); err == nil {
				r.calls = max(r.calls, 0) + c
				r.byCommand[strings.TrimPrefix(k, "cmdstat_")] = c
			}
		case k == "used_cpu_sys":
			sys, _ = strconv.ParseFloat(v, 64)
		case k == "used_cpu_user":
			user, _ = strconv.ParseFloat(v, 64)
		case k == "total_net_output_bytes":
			r.outBytes, _ = strconv.ParseInt(v, 10, 64)
		case k == "connected_clients":
			r.clients, _ = strconv.ParseInt(v, 10, 64)
		case k == "maxclients":
			r.maxClients, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	r.cpu = sys + user
	if r.calls < 0 || r.outBytes < 0 || r.clients < 0 {
		return r, fmt.Errorf("INFO on %s lacks commandstats, total_net_output_bytes or connected_clients: the fleet scenario needs a real Redis", r.addr)
	}
	return r, nil
}

// nodeDeltas turns two readings of every node into rates over the time
// between them.
func nodeDeltas(before, after []nodeReading) []FleetSample {
	out := make([]FleetSample, len(before))
	for i := range before {
		b, a := before[i], after[i]
		s := a.at.Sub(b.at).Seconds()
		out[i] = FleetSample{
			Node:        b.addr,
			CmdsPerSec:  float64(a.calls-b.calls) / s,
			CPUPercent:  100 * (a.cpu - b.cpu) / s,
			BytesPerSec: float64(a.outBytes-b.outBytes-b.infoBytes) / s,
			Clients:     a.clients - 1, // the bench's own connection
			MaxClients:  a.maxClients,
			ByCommand:   map[string]float64{},
		}
		for c, v := range a.byCommand {
			if d := v - b.byCommand[c]; d > 0 {
				out[i].ByCommand[c] = float64(d) / s
			}
		}
	}
	return out
}

// rankNodes orders a Cluster's masters busiest first (bytes sent, then
// commands): each run has namespaces of its own, whose channels and marks
// hash to other slots, so "master 1" is a different node from run to run;
// the busiest, the one holding a namespace's channel, is comparable.
func rankNodes(nodes []FleetSample) []FleetSample {
	sort.SliceStable(nodes, func(i, j int) bool {
		if nodes[i].BytesPerSec != nodes[j].BytesPerSec {
			return nodes[i].BytesPerSec > nodes[j].BytesPerSec
		}
		return nodes[i].CmdsPerSec > nodes[j].CmdsPerSec
	})
	return nodes
}

// sleepCtx sleeps for d, or until ctx ends (then its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (fc fleetConfig) describe() string {
	l1 := "L1 on"
	if fc.l1Off {
		l1 = "L1 off"
	}
	return fmt.Sprintf("fleet: %s, replicas %s × caches %s on %s, %d runs, %s windows (idle after %s, load after 1 s of it), "+
		"load %d req/s over the fleet, Zipf s=1.1 over %d keys per cache, %.0f %% Sets, PoolSize %d (pipelines too); write cost at %d replicas over %d Sets",
		l1, joinInts(fc.replicas), joinInts(fc.caches), strings.Join(fc.topologies, ", "), fc.runs, fc.window, fleetIdleStop,
		fc.rate, fc.keys, 100*fc.writeShare, fc.pool, fc.writeFleet, fc.writes)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// spread is the median and range of a figure over runs.
type spread struct{ med, lo, hi float64 }

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{-1, -1, -1}
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{m, s[0], s[len(s)-1]}
}

// fmt prints "median [min–max]" with the given precision, or the median
// alone for one run.
func (s spread) fmt(prec int) string {
	f := func(x float64) string { return groupDigits(strconv.FormatFloat(x, 'f', prec, 64)) }
	if f(s.lo) == f(s.hi) {
		return f(s.med)
	}
	return f(s.med) + " [" + f(s.lo) + "–" + f(s.hi) + "]"
}

// groupDigits puts thousands separators into a formatted number.
func groupDigits(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if hasFrac {
		return sign + b.String() + "." + frac
	}
	return sign + b.String()
}

// fleetColumns are the fleet table's columns after the shape.
var fleetColumns = []string{"req/s", "Redis cmds/s", "cmds/s per replica", "cmds per request", "Redis CPU %",
	"bytes sent/s", "bytes/s per replica", "bytes per request", "clients", "clients per replica",
	"GETs per Fetch", "origin calls per key computed", "busiest commands (per request; idle: per second)"}

// cells are a result's figures, one per fleetColumns, over its runs.
func (r FleetResult) cells() []string {
	per := func(f func(run FleetRun) float64) []float64 {
		out := make([]float64, len(r.Runs))
		for i, run := range r.Runs {
			out[i] = f(run)
		}
		return out
	}
	R := float64(r.Replicas)
	perReq := func(f func(t FleetSample) float64) string {
		if r.Phase == "idle" {
			return "—"
		}
		return spreadOf(per(func(run FleetRun) float64 {
			if run.ReqPerSec <= 0 {
				return 0
			}
			return f(run.total()) / run.ReqPerSec
		})).fmt(2)
	}
	// GETs per Fetch: 0 when every Fetch is an L1 hit, 1 when each
	// reads Redis once; a miss reads more than once (its GET, then the
	// claim's), so this bounds 1 − the L1 hit ratio from above.
	fromRedis := "—"
	if r.Phase == "load" {
		fromRedis = spreadOf(per(func(run FleetRun) float64 {
			if run.FetchPerSec <= 0 {
				return 0
			}
			return run.total().ByCommand["get"] / run.FetchPerSec
		})).fmt(2)
	}
	// Origin calls per key computed: 1.00 when one compute in the whole
	// fleet served each key (runs before the count was kept leave it out).
	origin := "—"
	if r.Phase == "load" && slices.ContainsFunc(r.Runs, func(run FleetRun) bool { return run.KeysComputed > 0 }) {
		origin = spreadOf(per(func(run FleetRun) float64 {
			if run.KeysComputed <= 0 {
				return 0
			}
			return float64(run.OriginCalls) / float64(run.KeysComputed)
		})).fmt(2)
	}
	reqs := "—"
	if r.Phase == "load" {
		reqs = spreadOf(per(func(run FleetRun) float64 { return run.ReqPerSec })).fmt(0)
	}
	return []string{
		reqs,
		spreadOf(per(func(run FleetRun) float64 { return run.total().CmdsPerSec })).fmt(0),
		spreadOf(per(func(run FleetRun) float64 { return run.total().CmdsPerSec / R })).fmt(2),
		perReq(func(t FleetSample) float64 { return t.CmdsPerSec }),
		spreadOf(per(func(run FleetRun) float64 { return run.total().CPUPercent })).fmt(1),
		spreadOf(per(func(run FleetRun) float64 { return run.total().BytesPerSec })).fmt(0),
		spreadOf(per(func(run FleetRun) float64 { return run.total().BytesPerSec / R })).fmt(1),
		perReq(func(t FleetSample) float64 { return t.BytesPerSec }),
		spreadOf(per(func(run FleetRun) float64 { return float64(run.total().Clients) })).fmt(0),
		spreadOf(per(func(run FleetRun) float64 { return float64(run.total().Clients) / R })).fmt(2),
		fromRedis,
		origin,
		r.mix(),
	}
}

// mix is the first run's busiest commands: per request under load, per
// second idle.
func (r FleetResult) mix() string {
	if len(r.Runs) == 0 {
		return "—"
	}
	run := r.Runs[0]
	div := 1.0
	if r.Phase == "load" && run.ReqPerSec > 0 {
		div = run.ReqPerSec
	}
	mix := map[string]float64{}
	for c, v := range run.total().ByCommand {
		mix[c] = v / div
	}
	return fmtMix(mix, 4)
}

// atMaxClients reports whether a node's connections reached its
// maxclients in any run (the bench's own connection is the last one).
func (r FleetResult) atMaxClients() bool {
	for _, run := range r.Runs {
		for _, n := range run.Nodes {
			if n.MaxClients > 0 && n.Clients+1 >= n.MaxClients {
				return true
			}
		}
	}
	return false
}

// shardCells are, for a Cluster result, each master's commands/s, CPU %,
// bytes sent/s and clients, "a / b / c" in master order.
func (r FleetResult) shardCells() []string {
	if len(r.Runs) == 0 || len(r.Runs[0].Nodes) < 2 {
		return nil
	}
	nodes := len(r.Runs[0].Nodes)
	fig := func(f func(FleetSample) float64, prec int) string {
		parts := make([]string, nodes)
		for i := range nodes {
			v := make([]float64, 0, len(r.Runs))
			for _, run := range r.Runs {
				if i < len(run.Nodes) {
					v = append(v, f(run.Nodes[i]))
				}
			}
			parts[i] = groupDigits(strconv.FormatFloat(spreadOf(v).med, 'f', prec, 64))
		}
		return strings.Join(parts, " / ")
	}
	return []string{
		fig(func(s FleetSample) float64 { return s.CmdsPerSec }, 0),
		fig(func(s FleetSample) float64 { return s.CPUPercent }, 1),
		fig(func(s FleetSample) float64 { return s.BytesPerSec }, 0),
		fig(func(s FleetSample) float64 { return float64(s.Clients) }, 0),
	}
}

// writeFleet prints the fleet scenario's tables in Markdown: every shape
// (median [min–max] of the runs), the Cluster's shards, the write cost.
func writeFleet(w io.Writer, rep *FleetReport) {
	if rep == nil {
		return
	}
	fmt.Fprintf(w, "Fleet (%s). Each cell: median [min–max] of the runs; per request: over the fleet's requests in the window.\n\n", rep.Config)
	fmt.Fprintf(w, "| topology | R × N | phase | %s |\n", strings.Join(fleetColumns, " | "))
	fmt.Fprintf(w, "|---|---|---|%s\n", strings.Repeat("---|", len(fleetColumns)))
	for _, r := range rep.Results {
		fmt.Fprintf(w, "| %s | %d × %d | %s | %s |\n", r.Topology, r.Replicas, r.Caches, r.Phase, strings.Join(r.cells(), " | "))
	}
	for _, r := range rep.Results {
		if r.atMaxClients() {
			fmt.Fprintf(w, "\nNOTE: %s %d × %d: a node reached its maxclients; Redis refused the connections past it, and the load's figures are those of a fleet partly degraded.\n",
				r.Topology, r.Replicas, r.Caches)
		}
	}
	var shards []FleetResult
	for _, r := range rep.Results {
		if r.shardCells() != nil {
			shards = append(shards, r)
		}
	}
	if len(shards) > 0 {
		fmt.Fprintln(w, "\nPer shard, busiest first (by bytes sent, in each run: each run's namespaces hash to other slots), medians: commands/s, Redis CPU %, bytes sent/s, clients.")
		fmt.Fprintln(w, "\n| topology | R × N | phase | cmds/s | CPU % | bytes sent/s | clients |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, r := range shards {
			fmt.Fprintf(w, "| %s | %d × %d | %s | %s |\n", r.Topology, r.Replicas, r.Caches, r.Phase, strings.Join(r.shardCells(), " | "))
		}
	}
	if len(rep.Writes) > 0 {
		fmt.Fprintln(w, "\nWrite cost: bytes Redis sends (every node) for one Set on a key one replica has read, median [min–max]:")
		fmt.Fprintln(w, "\n| topology | replicas | bytes per Set | per replica |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, wr := range rep.Writes {
			s := spreadOf(wr.BytesPerSet)
			fmt.Fprintf(w, "| %s | %d | %s | %.1f |\n", wr.Topology, wr.Replicas, s.fmt(0), s.med/float64(wr.Replicas))
		}
	}
}

// errFleetNeedsRedis is returned when the fleet scenario would run on the
// in-process server, which keeps none of the counters it reads.
var errFleetNeedsRedis = errors.New("the fleet scenario reads Redis' own counters (INFO commandstats, cpu, stats): it needs a redis-server (REDIS_URL, or the binary on PATH)")

// parse reads the list flags and checks the fleet scenario's settings.
func (fc *fleetConfig) parse(replicas, caches, topologies string) error {
	ints := func(name, s string, hi int) ([]int, error) {
		var out []int
		for _, f := range split(s) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 || n > hi {
				return nil, fmt.Errorf("-%s: need integers 1 to %d, got %q", name, hi, f)
			}
			out = append(out, n)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("-%s: need at least one count", name)
		}
		return out, nil
	}
	var err error
	if fc.replicas, err = ints("fleet-replicas", replicas, 5000); err != nil {
		return err
	}
	if fc.caches, err = ints("fleet-caches", caches, 20); err != nil {
		return err
	}
	fc.topologies = split(topologies)
	for _, t := range fc.topologies {
		if t != "single" && t != "cluster" {
			return fmt.Errorf("-fleet-topologies: unknown %q: single or cluster", t)
		}
	}
	switch {
	case len(fc.topologies) == 0:
		return errors.New("-fleet-topologies: need single, cluster or both")
	case fc.runs < 1 || fc.runs > 20, fc.window < 100*time.Millisecond || fc.window > 10*time.Minute:
		return errors.New("need 1 <= fleet-runs <= 20, 100ms <= fleet-window <= 10m")
	case fc.rate < 1 || fc.rate > 100_000, fc.keys < 2 || fc.keys > 10_000_000:
		return errors.New("need 1 <= fleet-rate <= 100000, 2 <= fleet-keys <= 1e7")
	case fc.writeShare < 0 || fc.writeShare > 1, fc.pool < 1 || fc.pool > 1000:
		return errors.New("need 0 <= fleet-writes <= 1, 1 <= fleet-pool <= 1000")
	case fc.writeFleet < 0 || fc.writeFleet > 5000, fc.writes < 1 || fc.writes > 100_000:
		return errors.New("need 0 <= fleet-write-replicas <= 5000, 1 <= fleet-write-sets <= 100000")
	}
	return nil
}

// readFleetReport reads the fleet figures of a results.json written by
// -out.
func readFleetReport(path string) (*FleetReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading -fleet-before: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("reading -fleet-before %s: %w", path, err)
	}
	if rep.Fleet == nil {
		return nil, fmt.Errorf("-fleet-before %s holds no fleet figures", path)
	}
	return rep.Fleet, nil
}

// fleetCompared are the columns the before/after table shows, as indexes
// into fleetColumns.
var fleetCompared = []int{0, 2, 3, 4, 7, 9}

// writeFleetCompare prints the shapes both reports measured side by side,
// before | after, for the figures that say what a fleet costs (per
// replica, per request, Redis CPU, clients per replica), and the write
// cost. Medians [min–max] as in the main table.
func writeFleetCompare(w io.Writer, before, after *FleetReport) {
	type shape struct {
		topo  string
		r, n  int
		phase string
	}
	old := map[shape]FleetResult{}
	for _, r := range before.Results {
		old[shape{r.Topology, r.Replicas, r.Caches, r.Phase}] = r
	}
	fmt.Fprintln(w, "\nBefore (-fleet-before) | after (this run), median [min–max]:")
	fmt.Fprint(w, "\n| topology | R × N | phase |")
	for _, i := range fleetCompared {
		fmt.Fprintf(w, " %s (before) | after |", fleetColumns[i])
	}
	fmt.Fprintf(w, "\n|---|---|---|%s\n", strings.Repeat("---|---|", len(fleetCompared)))
	for _, r := range after.Results {
		b, ok := old[shape{r.Topology, r.Replicas, r.Caches, r.Phase}]
		if !ok {
			continue
		}
		bc, ac := b.cells(), r.cells()
		fmt.Fprintf(w, "| %s | %d × %d | %s |", r.Topology, r.Replicas, r.Caches, r.Phase)
		for _, i := range fleetCompared {
			fmt.Fprintf(w, " %s | %s |", bc[i], ac[i])
		}
		fmt.Fprintln(w)
	}
	for _, a := range after.Writes {
		for _, b := range before.Writes {
			if a.Topology == b.Topology && a.Replicas == b.Replicas {
				fmt.Fprintf(w, "\nWrite cost, %s, %d replicas: %s bytes per Set before, %s after.\n",
					a.Topology, a.Replicas, spreadOf(b.BytesPerSet).fmt(0), spreadOf(a.BytesPerSet).fmt(0))
			}
		}
	}
}
