// Command replica is one replica of the robustness suite: a process with its
// own go-redis client and cache.Cache, driven by the suite through its
// standard input and output (one wire.Request or wire.Response per line), so
// that the suite can kill it (SIGKILL), pause it (SIGSTOP) and put a fault
// proxy between it and Redis. Its compute functions read a versioned
// register per key from the suite's origin over loopback HTTP, so every
// value it returns names the compute that made it.
//
// Usage: replica CONFIG_JSON (a wire.Config). It is built and started by the
// robustness package's tests, not by hand.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/robustness/wire"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: replica CONFIG_JSON")
	}
	var cfg wire.Config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	rdb := client(cfg)
	c, err := cache.New[wire.Value](rdb, options(cfg.Options))
	if err != nil {
		return err
	}
	r := &replica{cfg: cfg, c: c, origin: newOrigin(cfg.Origin, cfg.Replica), mu: new(sync.Mutex), out: json.NewEncoder(os.Stdout)}
	if r.http, err = startHTTP(r, rdb, options(cfg.Options)); err != nil {
		return err
	}
	twin := r
	if cfg.Twin {
		// The same client, the same namespace: another replica of the
		// fleet as far as the protocol goes, sharing this one's pub/sub
		// connection and heartbeat.
		tc, err := cache.New[wire.Value](rdb, options(cfg.Options))
		if err != nil {
			return err
		}
		defer tc.Close()
		twin = &replica{cfg: cfg, c: tc, origin: newOrigin(cfg.Origin, cfg.Replica+wire.TwinSuffix), mu: r.mu, out: r.out}
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	var wg sync.WaitGroup
	for in.Scan() {
		var req wire.Request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			return fmt.Errorf("request: %w", err)
		}
		to := r
		if req.Twin {
			to = twin
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			to.reply(to.do(req))
		}()
	}
	// The suite closed our input: finish what runs, then stop.
	wg.Wait()
	return c.Close()
}

// client is the go-redis client cfg describes (nil in local mode).
func client(cfg wire.Config) redis.UniversalClient {
	o := &redis.UniversalOptions{Addrs: cfg.Addrs, MasterName: cfg.SentinelMaster}
	if cfg.Recommended {
		o.ContextTimeoutEnabled = true
		o.DialTimeout = time.Second
		o.ReadTimeout = 500 * time.Millisecond
		o.WriteTimeout = 500 * time.Millisecond
		o.MaxRetries = 1
	}
	switch cfg.Mode {
	case "local":
		return nil
	case "cluster":
		return redis.NewClusterClient(o.Cluster())
	case "sentinel":
		return redis.NewFailoverClient(o.Failover())
	default:
		return redis.NewClient(o.Simple())
	}
}

func options(o wire.Options) cache.Options {
	opts := cache.Options{
		Namespace: o.Namespace, TTL: o.TTL, Stale: o.Stale, StaleIfError: o.StaleIfError,
		FailSafeThrottle: o.FailSafeThrottle, SoftTimeout: o.SoftTimeout, LeaseTTL: o.LeaseTTL,
		ComputeTimeout: o.ComputeTimeout, WaitTimeout: o.WaitTimeout, PollInterval: o.PollInterval,
		RedisTimeout: o.RedisTimeout, BreakerCooldown: o.BreakerCooldown, L1Size: o.L1Size,
		L1TTL: o.L1TTL, DegradedTTL: o.DegradedTTL, InvalidationWait: o.InvalidationWait, Beta: o.Beta,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if o.BusyError {
		opts.OnBusy = cache.BusyError
	}
	if o.SlowCodec {
		opts.Codec = slowCodec{}
	}
	return opts
}

type replica struct {
	cfg    wire.Config
	c      *cache.Cache[wire.Value]
	origin *origin
	http   *httpPath   // nil for a twin
	mu     *sync.Mutex // guards out, shared with the twin
	out    *json.Encoder
}

func (r *replica) reply(resp wire.Response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.out.Encode(resp); err != nil {
		fmt.Fprintln(os.Stderr, "replica: reply:", err)
		os.Exit(1)
	}
}

// do runs one request under its deadline.
func (r *replica) do(req wire.Request) (resp wire.Response) {
	invoked := time.Now().UnixNano()
	defer func() { resp.Invoked, resp.Returned = invoked, time.Now().UnixNano() }()
	resp.ID = req.ID
	ctx, cancel := context.WithTimeout(context.Background(), req.Deadline)
	defer cancel()
	fn := r.fn(req)
	var err error
	switch req.Op {
	case wire.OpGetOrCompute:
		var v wire.Value
		if v, err = r.c.GetOrCompute(ctx, req.Key, fn); err == nil {
			resp.Value = &v
		}
	case wire.OpFetch, wire.OpFetchWithFallback:
		var res cache.Result[wire.Value]
		if req.Op == wire.OpFetch {
			res, err = r.c.Fetch(ctx, req.Key, fn)
		} else {
			res, err = r.c.FetchWithFallback(ctx, req.Key, fn, r.fallback(req))
		}
		if err == nil {
			resp.Value = &res.Value
			resp.Outcome = res.Outcome.String()
			if res.Err != nil {
				resp.ResultErr = kind(res.Err)
			}
		}
	case wire.OpGetOrComputeMany:
		var vals map[string]wire.Value
		vals, err = r.c.GetOrComputeMany(ctx, req.Keys, r.batchFn(req))
		resp.Values = vals
		var perKey cache.KeyErrors
		if asKeyErrors(err, &perKey) {
			resp.KeyErrs = make(map[string]string, len(perKey))
			for k, e := range perKey {
				resp.KeyErrs[k] = kind(e) + ": " + e.Error()
			}
			err = nil
		}
	case wire.OpGet:
		var v wire.Value
		var found bool
		if v, found, err = r.c.Get(ctx, req.Key); err == nil && found {
			resp.Value, resp.Found = &v, true
		}
	case wire.OpSet:
		v := wire.Value{Key: req.Key, Src: "set", ID: fmt.Sprintf("s%d", req.ID), Tags: req.Tags}
		var opts []cache.SetOption
		if req.SetTTL > 0 {
			opts = append(opts, cache.WithTTL(req.SetTTL))
		}
		if req.SetStale > 0 {
			opts = append(opts, cache.WithStale(req.SetStale))
		}
		if len(req.Tags) > 0 {
			opts = append(opts, cache.WithTags(req.Tags...))
		}
		err = r.c.Set(ctx, req.Key, v, opts...)
	case wire.OpDelete:
		err = r.c.Delete(ctx, req.Key)
	case wire.OpExpire:
		err = r.c.Expire(ctx, req.Key)
	case wire.OpInvalidateTags:
		err = r.c.InvalidateTags(ctx, req.Tags...)
	case wire.OpExpireTags:
		err = r.c.ExpireTags(ctx, req.Tags...)
	case wire.OpClear:
		err = r.c.Clear(ctx)
	case wire.OpHTTPGet, wire.OpHTTPPost, wire.OpHTTPPurge:
		if r.http == nil {
			err = fmt.Errorf("op %q sent to a twin", req.Op)
			break
		}
		resp, err = r.http.do(ctx, req)
		resp.ID = req.ID
	case wire.OpStats:
		resp.Stats = stats(r.c.Stats())
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		resp.Value, resp.Found = nil, false
		resp.Err, resp.ErrText = kind(err), err.Error()
	}
	return resp
}

// stats turns cache.Stats into a map of its counters.
func stats(s cache.Stats) map[string]uint64 {
	m := map[string]uint64{}
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			m[v.Type().Field(i).Name] = f.Uint()
		}
	}
	return m
}
