// Command bench runs load tests that show a cache stampede stopped, with
// peers side by side in one run against one Redis.
//
//	go run -C bench .                 # the default suite, about 90 s of runs on 2 cores
//	go run -C bench . -short          # every strategy for a second on a small size
//	go run -C bench . -out out        # also results.json, results.md and PNG charts (latency CDF, origin calls per expiry)
//
// It prints a verdict first (each strategy's origin calls per key expiry,
// and whether the stampede was stopped), then the full table, then where
// the charts are.
//
// Scenario "storm": R replicas (each its own cache and Redis client) x C
// callers hammer one hot key, then 1,000 Zipf-distributed keys, under a TTL
// short enough that keys expire many times; every strategy runs in turn.
// Scenario "http": R instances of a chi server with an expensive route,
// driven by vegeta at a fixed rate, with the stampede middleware on and off.
// Scenario "faults" (not in the default run): every strategy through Redis
// refusing connections, the origin failing and Redis slowed by 50 ms each
// way, one phase each, via a TCP proxy in front of Redis.
//
// Scenario "fleet" (not in the default run; about 12 minutes on 2 cores): what R
// replicas (each its own go-redis client, PoolSize 2, pipelines on that
// pool) × N caches
// (cache.Cache[string], default options, L1 on) cost Redis, idle (after
// one call on every cache and the heartbeats' idle stop) and under a
// bounded Zipf load with 10 % Sets, at R = 8, 64, 256, 1,000 and N = 1, 5,
// on the bench's Redis and on a 3-master Cluster of its own: Redis
// commands/s, CPU, bytes sent and connections, per replica and per
// request, per shard on the Cluster, and the bytes Redis sends for one Set
// in a fleet of 512. -fleet-before FILE shows a previous run's figures
// (its results.json) beside this run's.
//
//	go run -C bench . -scenarios fleet -out out
//
// Redis: $REDIS_URL when set; else a redis-server child process on a free
// loopback port; else an in-process server, whose figures are marked as not
// comparable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/embedded"
)

type config struct {
	replicas, callers, keys int
	// replicaCounts are the storm's replica counts (-replicas 8,32,64);
	// replicas is the first, for the other scenarios.
	replicaCounts            []int
	originLatency, ttl       time.Duration
	duration, think          time.Duration
	valueSize                int
	scenarios, strats, dists []string
	httpInstances, httpRate  int
	faultPhase, faultSettle  time.Duration
	out                      string
	short                    bool
	cpuProfile               string
	// clientOptions is "default" (go-redis' defaults) or "recommended"
	// (the README's: ContextTimeoutEnabled, short timeouts, one retry).
	clientOptions string
	fleet         fleetConfig
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := exitCode(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// exitCode runs the bench and returns its exit status: 0 when it ran or
// when -h asked for the usage, 1 on an error (printed to errOut).
func exitCode(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	if _, err := run(ctx, args, out, errOut, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) { // the usage was asked for, and printed
			return 0
		}
		fmt.Fprintln(errOut, "bench:", err)
		return 1
	}
	return 0
}

func parse(args []string, errOut io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var cfg config
	replicas := fs.String("replicas", "8", "simulated replicas, each with its own cache and Redis client; a comma-separated list runs the storm once per count")
	fs.IntVar(&cfg.callers, "callers", 100, "concurrent callers per replica")
	fs.IntVar(&cfg.keys, "keys", 1000, "keys of the Zipf distribution")
	fs.DurationVar(&cfg.originLatency, "latency", 50*time.Millisecond, "origin latency")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "cache TTL (short, so keys expire many times)")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "duration of each strategy's run")
	fs.DurationVar(&cfg.think, "think", 10*time.Millisecond, "mean pause of a caller between requests (0: none)")
	fs.IntVar(&cfg.valueSize, "value-size", 256, "value size in bytes")
	scenarios := fs.String("scenarios", "storm,hits,http", "scenarios to run: storm, hits, http, faults (not in the default run: about 2.5 minutes per key distribution), overload (the storm at 64 replicas x 50 callers, whatever -replicas and -callers say), fleet (not in the default run: what R replicas x N caches cost Redis, idle and under load, about 12 minutes on 2 cores)")
	strats := fs.String("strategies", "all", "comma-separated strategies of the storm scenario, or all: "+strings.Join(strategyNames(), ", "))
	dists := fs.String("dists", "hot,zipf", "key distributions: hot, zipf")
	fs.IntVar(&cfg.httpInstances, "http-instances", 4, "server instances of the http scenario")
	fs.IntVar(&cfg.httpRate, "http-rate", 2000, "requests per second of the http scenario")
	fs.DurationVar(&cfg.faultPhase, "fault-phase", 3*time.Second, "length of each phase of the faults scenario")
	fs.DurationVar(&cfg.faultSettle, "fault-settle", time.Second, "unmeasured healthy load before each phase of the faults scenario")
	fs.StringVar(&cfg.out, "out", "", "directory for results.json, results.md and charts")
	fs.BoolVar(&cfg.short, "short", false, "every strategy for a second on a small size (what CI runs)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&cfg.clientOptions, "client-options", "default", "go-redis options of every replica's client: default (go-redis' own) or recommended (the README's)")
	fleetReplicas := fs.String("fleet-replicas", "8,64,256,1000", "fleet scenario: replica counts R, each its own go-redis client")
	fleetCaches := fs.String("fleet-caches", "1,5", "fleet scenario: caches per replica N")
	fleetTopologies := fs.String("fleet-topologies", "single,cluster", "fleet scenario: single (the bench's Redis) and/or cluster (a 3-master Cluster of its own)")
	fs.IntVar(&cfg.fleet.runs, "fleet-runs", 3, "fleet scenario: runs per shape (the table shows their median and min–max)")
	fs.DurationVar(&cfg.fleet.window, "fleet-window", 3*time.Second, "fleet scenario: length of each measured window, idle and under load")
	fs.IntVar(&cfg.fleet.rate, "fleet-rate", 200, "fleet scenario: requests per second over the whole fleet under load")
	fs.IntVar(&cfg.fleet.keys, "fleet-keys", 1000, "fleet scenario: Zipf keys per cache")
	fs.Float64Var(&cfg.fleet.writeShare, "fleet-writes", 0.1, "fleet scenario: share of the requests that are Sets")
	fs.IntVar(&cfg.fleet.pool, "fleet-pool", 2, "fleet scenario: go-redis PoolSize of every replica's client (its pipelines run on that pool: PipelinePoolSize -1)")
	fs.IntVar(&cfg.fleet.writeFleet, "fleet-write-replicas", 512, "fleet scenario: replicas of the write-cost measurement (0: skip it)")
	fs.IntVar(&cfg.fleet.writes, "fleet-write-sets", 50, "fleet scenario: Sets the write-cost measurement times")
	fs.BoolVar(&cfg.fleet.l1Off, "fleet-l1-off", false, "fleet scenario: L1Size -1 on every cache (on a Cluster a cache without L1 does not subscribe to its namespace's channel)")
	fs.StringVar(&cfg.fleet.before, "fleet-before", "", "fleet scenario: a results.json (from -out) whose fleet figures to show beside this run's, before | after")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("replicas", func() { *replicas = "3" })
		def("callers", func() { cfg.callers = 20 })
		def("keys", func() { cfg.keys = 100 })
		def("latency", func() { cfg.originLatency = 20 * time.Millisecond })
		def("ttl", func() { cfg.ttl = 400 * time.Millisecond })
		def("duration", func() { cfg.duration = time.Second })
		def("http-instances", func() { cfg.httpInstances = 2 })
		def("http-rate", func() { cfg.httpRate = 300 })
		def("fault-phase", func() { cfg.faultPhase = time.Second })
		def("fault-settle", func() { cfg.faultSettle = 500 * time.Millisecond })
		def("fleet-replicas", func() { *fleetReplicas = "4" })
		def("fleet-caches", func() { *fleetCaches = "1,2" })
		def("fleet-runs", func() { cfg.fleet.runs = 1 })
		def("fleet-window", func() { cfg.fleet.window = time.Second })
		def("fleet-rate", func() { cfg.fleet.rate = 100 })
		def("fleet-keys", func() { cfg.fleet.keys = 100 })
		def("fleet-write-replicas", func() { cfg.fleet.writeFleet = 8 })
		def("fleet-write-sets", func() { cfg.fleet.writes = 20 })
	}
	if err := cfg.fleet.parse(*fleetReplicas, *fleetCaches, *fleetTopologies); err != nil {
		return cfg, err
	}
	for _, r := range split(*replicas) {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 || n > 64 {
			return cfg, fmt.Errorf("need 1 <= replicas <= 64, got %q", r)
		}
		cfg.replicaCounts = append(cfg.replicaCounts, n)
	}
	if len(cfg.replicaCounts) == 0 {
		return cfg, errors.New("need at least one replica count")
	}
	cfg.replicas = cfg.replicaCounts[0]
	cfg.scenarios = split(*scenarios)
	cfg.dists = split(*dists)
	cfg.strats = split(*strats)
	if slices.Contains(cfg.strats, "all") {
		cfg.strats = strategyNames()
	}
	switch {
	case cfg.replicas < 1 || cfg.replicas > 64, cfg.callers < 1 || cfg.callers > 10_000, cfg.keys < 2 || cfg.keys > 10_000_000:
		return cfg, errors.New("need 1 <= replicas <= 64, 1 <= callers <= 10000, 2 <= keys <= 1e7")
	case cfg.duration <= 0 || cfg.duration > time.Hour, cfg.ttl < 10*time.Millisecond, cfg.originLatency < 0, cfg.think < 0:
		return cfg, errors.New("need 0 < duration <= 1h, ttl >= 10ms, latency and think >= 0")
	case cfg.valueSize < 1 || cfg.valueSize > 1<<20, cfg.httpInstances < 1 || cfg.httpInstances > 64, cfg.httpRate < 1 || cfg.httpRate > 100_000:
		return cfg, errors.New("need 1 <= value-size <= 1MiB, 1 <= http-instances <= 64, 1 <= http-rate <= 100000")
	case cfg.faultPhase <= 0 || cfg.faultPhase > time.Minute, cfg.faultSettle < 0 || cfg.faultSettle > time.Minute:
		return cfg, errors.New("need 0 < fault-phase <= 1m, 0 <= fault-settle <= 1m")
	}
	if cfg.clientOptions != "default" && cfg.clientOptions != "recommended" {
		return cfg, fmt.Errorf("unknown -client-options %q: default or recommended", cfg.clientOptions)
	}
	for _, s := range cfg.strats {
		if !slices.Contains(strategyNames(), s) {
			return cfg, fmt.Errorf("unknown strategy %q", s)
		}
	}
	for _, s := range cfg.scenarios {
		if s != "storm" && s != "http" && s != "hits" && s != "faults" && s != "overload" && s != "fleet" {
			return cfg, fmt.Errorf("unknown scenario %q", s)
		}
	}
	for _, d := range cfg.dists {
		if d != "hot" && d != "zipf" {
			return cfg, fmt.Errorf("unknown key distribution %q", d)
		}
	}
	return cfg, nil
}

// clientOptions returns base, or a copy with the client options the
// README recommends when which is "recommended".
func clientOptions(base *redis.Options, which string) *redis.Options {
	if which != "recommended" {
		return base
	}
	o := *base
	o.ContextTimeoutEnabled = true
	o.DialTimeout = time.Second
	o.ReadTimeout, o.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond
	o.MaxRetries = 1
	return &o
}

// stormSizes are the (replicas, callers) of a storm scenario's runs: the
// overload scenario is 64 replicas x 50 callers (issue 30: where a slow
// Redis used to turn into local computes), the storm one run per -replicas
// count.
func stormSizes(cfg config, scenario string) [][2]int {
	if scenario == "overload" {
		return [][2]int{{64, 50}}
	}
	var out [][2]int
	for _, r := range cfg.replicaCounts {
		out = append(out, [2]int{r, cfg.callers})
	}
	return out
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func strategyNames() []string {
	var out []string
	for _, s := range strategies {
		out = append(out, s.name)
	}
	return out
}

// run runs the suite, prints the table to out and a live progress line to
// progressOut, and writes the output files when -out is given.
func run(ctx context.Context, args []string, out, progressOut io.Writer, getenv func(string) string) (*Report, error) {
	cfg, err := parse(args, progressOut)
	if err != nil {
		return nil, err
	}
	var fleetBefore *FleetReport
	if cfg.fleet.before != "" { // read first: a bad path must not cost a whole run
		if fleetBefore, err = readFleetReport(cfg.fleet.before); err != nil {
			return nil, err
		}
	}
	env, err := embedded.Open(getenv)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintln(out, "Redis:", env.Description)
	admin := redis.NewClient(env.Options)
	defer admin.Close()
	newClient := func() *redis.Client { return redis.NewClient(clientOptions(env.Options, cfg.clientOptions)) }

	rep := &Report{
		Command:    "go run -C bench . " + strings.Join(args, " "),
		Redis:      env.Description,
		Comparable: env.Comparable,
		Machine:    machine(ctx, admin),
		StartedAt:  time.Now().UTC().Format(time.RFC3339),
		Config:     cfg.describe(),
	}
	fmt.Fprintln(out, "Machine:", rep.Machine)
	fmt.Fprintln(out, "Config: ", rep.Config)
	if !env.Comparable {
		fmt.Fprintln(out, "NOTE: figures from an in-process server are not comparable to a real Redis.")
	}
	if slices.Contains(cfg.scenarios, "faults") {
		redis.SetLogger(quietRedisLog{}) // go-redis' logger is process-wide
	}
	p := &progress{w: progressOut, live: isTerminal(progressOut)}
	dists := distributions(cfg.keys)
	for _, scenario := range cfg.scenarios {
		if scenario == "fleet" { // no key distribution of its own: its load is Zipf
			if !env.Comparable {
				return nil, errFleetNeedsRedis
			}
			fr, err := runFleet(ctx, cfg.fleet, env.Options, p)
			if err != nil {
				return nil, fmt.Errorf("fleet: %w", err)
			}
			rep.Fleet = fr
			continue
		}
		for _, d := range dists {
			if !slices.Contains(cfg.dists, strings.SplitN(d.name, "-", 2)[0]) {
				continue
			}
			switch scenario {
			case "storm", "overload":
				for _, size := range stormSizes(cfg, scenario) {
					scfg, sd := cfg, d
					scfg.replicas, scfg.callers = size[0], size[1]
					if scenario == "overload" || len(cfg.replicaCounts) > 1 {
						sd.name = fmt.Sprintf("%s/%dx%d", d.name, size[0], size[1]) // a namespace may hold "/"
					}
					for _, def := range strategies {
						if !slices.Contains(cfg.strats, def.name) {
							continue
						}
						res, err := runStorm(ctx, scfg, admin, newClient, def, sd, p)
						if err != nil {
							return nil, fmt.Errorf("storm %s %s: %w", sd.name, def.name, err)
						}
						rep.Results = append(rep.Results, res)
						if ctx.Err() != nil {
							return nil, ctx.Err()
						}
					}
				}
			case "faults":
				for _, def := range strategies {
					if !slices.Contains(cfg.strats, def.name) {
						continue
					}
					res, err := runFaults(ctx, cfg, admin, env.Options, def, d, p)
					if err != nil {
						return nil, fmt.Errorf("faults %s %s: %w", d.name, def.name, err)
					}
					rep.Results = append(rep.Results, res...)
				}
			case "hits":
				if !strings.HasPrefix(d.name, "hot") {
					continue
				}
				res, err := runHits(ctx, cfg, admin, newClient, p)
				if err != nil {
					return nil, fmt.Errorf("hits: %w", err)
				}
				rep.Results = append(rep.Results, res...)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			case "http":
				for _, on := range []bool{false, true} {
					res, err := runHTTP(ctx, cfg, admin, newClient, on, d, p)
					if err != nil {
						return nil, fmt.Errorf("http %s: %w", d.name, err)
					}
					rep.Results = append(rep.Results, res)
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
				}
			}
		}
	}
	fmt.Fprintln(out)
	if len(rep.Results) > 0 || rep.Fleet == nil {
		writeSummary(out, rep.Results, cfg.out) // the figures first: a failed write loses none
	}
	if rep.Fleet != nil {
		writeFleet(out, rep.Fleet)
		if fleetBefore != nil {
			writeFleetCompare(out, fleetBefore, rep.Fleet)
		}
	}
	if cfg.out != "" {
		if err := writeOutputs(cfg.out, *rep); err != nil {
			return nil, fmt.Errorf("writing -out %s: %w", cfg.out, err)
		}
	}
	return rep, nil
}

// describe is the run's configuration line: the settings of the scenarios
// that run, not those of the others (no faults settings without the faults
// scenario).
func (cfg config) describe() string {
	if len(cfg.scenarios) > 0 && !slices.ContainsFunc(cfg.scenarios, func(s string) bool { return s != "fleet" }) {
		return cfg.fleet.describe() // none of the other settings apply
	}
	s := fmt.Sprintf("client options %s, replicas=%d callers=%d keys=1 hot and %d zipf, origin latency %s, TTL %s, %s per run, think %s, value %d B",
		cfg.clientOptions, cfg.replicas, cfg.callers, cfg.keys, cfg.originLatency, cfg.ttl, cfg.duration, cfg.think, cfg.valueSize)
	if slices.Contains(cfg.scenarios, "http") {
		s += fmt.Sprintf("; http: %d instances at %d req/s", cfg.httpInstances, cfg.httpRate)
	}
	if slices.Contains(cfg.scenarios, "faults") {
		s += fmt.Sprintf("; faults: %s phases after %s settling", cfg.faultPhase, cfg.faultSettle)
	}
	if slices.Contains(cfg.scenarios, "fleet") {
		s += "; " + cfg.fleet.describe()
	}
	return s
}

func machine(ctx context.Context, admin *redis.Client) string {
	version := "unknown"
	if info, err := admin.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	return fmt.Sprintf("%d cores, %s %s/%s, Redis %s", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, version)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
