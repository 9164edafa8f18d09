package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/robustness/wire"
)

// errOrigin is what a compute told to fail returns.
var errOrigin = errors.New("origin: failed as told")

// errFallback is what a fallback told to fail returns.
var errFallback = errors.New("fallback: failed as told")

// origin is the suite's versioned register, read over loopback HTTP.
type origin struct {
	base, replica string
	hc            *http.Client
}

func newOrigin(base, replica string) *origin {
	return &origin{base: base, replica: replica, hc: &http.Client{Timeout: 10 * time.Second}}
}

// begin tells the origin a compute of key begins, and reads the key's
// version: the origin stamps the compute with its own clock.
func (o *origin) begin(key string, req int64) (id string, version int64, err error) {
	var out struct {
		ID      string
		Version int64
	}
	q := url.Values{"key": {key}, "replica": {o.replica}, "req": {fmt.Sprint(req)}}
	if err := o.get("/begin?"+q.Encode(), &out); err != nil {
		return "", 0, err
	}
	return out.ID, out.Version, nil
}

// end tells the origin the compute id ended: how, and, for a revalidation,
// which earlier value it vouched for again.
func (o *origin) end(id, how, revalidated string) {
	q := url.Values{"id": {id}, "how": {how}, "revalidated": {revalidated}}
	_ = o.get("/end?"+q.Encode(), nil)
}

func (o *origin) get(path string, out any) error {
	resp, err := o.hc.Get(o.base + path)
	if err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("origin: %s", resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// compute is one run of a compute function for key, as req.Compute says.
func (r *replica) compute(ctx context.Context, req wire.Request, key string) (wire.Value, error) {
	b := req.Compute
	id, version, err := r.origin.begin(key, req.ID)
	if err != nil {
		return wire.Value{}, err
	}
	how, revalidated := "ok", ""
	defer func() {
		if how != "" {
			r.origin.end(id, how, revalidated)
		}
	}()
	if b.Sleep > 0 && b.IgnoreContext {
		time.Sleep(b.Sleep) // a compute that ignores its context
	} else if b.Sleep > 0 {
		t := time.NewTimer(b.Sleep)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			how = "cancelled"
			return wire.Value{}, context.Cause(ctx)
		}
	}
	switch {
	case b.Panic:
		how = "panic"
		r.origin.end(id, how, "")
		how = "" // ended above: a panic skips nothing but the return
		panic("compute told to panic")
	case b.Fail:
		how = "failed"
		return wire.Value{}, errOrigin
	case b.NotFound:
		how = "not-found"
		return wire.Value{}, cache.ErrNotFound
	}
	if b.Unchanged {
		if prev, ok := previousValue(ctx, key); ok && prev.Src == "compute" && prev.Version == version {
			how, revalidated = "unchanged", prev.ID
			return wire.Value{}, cache.ErrUnchanged
		}
	}
	if len(b.Tags) > 0 {
		if err := cache.SetTags(ctx, b.Tags...); err != nil {
			how = "failed"
			return wire.Value{}, err
		}
	}
	if b.TTL > 0 {
		cache.SetTTL(ctx, b.TTL)
	}
	return wire.Value{Key: key, Src: "compute", ID: id, Version: version, Tags: b.Tags, Pad: make([]byte, b.Pad)}, nil
}

func (r *replica) fn(req wire.Request) func(context.Context) (wire.Value, error) {
	return func(ctx context.Context) (wire.Value, error) { return r.compute(ctx, req, req.Key) }
}

func (r *replica) batchFn(req wire.Request) func(context.Context, []string) (map[string]wire.Value, error) {
	var calls atomic.Int32
	return func(ctx context.Context, missing []string) (map[string]wire.Value, error) {
		call := req
		if req.Compute.FailOnce && calls.Add(1) == 1 {
			call.Compute.Fail = true
		}
		out := make(map[string]wire.Value, len(missing))
		for _, k := range missing {
			v, err := r.compute(ctx, call, k)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
}

func (r *replica) fallback(req wire.Request) func(context.Context) (wire.Value, error) {
	return func(context.Context) (wire.Value, error) {
		if req.Compute.FallbackFails {
			return wire.Value{}, errFallback
		}
		return wire.Value{Key: req.Key, Src: "fallback", ID: fmt.Sprintf("f%d", req.ID)}, nil
	}
}

func asKeyErrors(err error, target *cache.KeyErrors) bool { return errors.As(err, target) }

// kind names err by the documented sentinel it matches.
func kind(err error) string {
	var pe *cache.PanicError
	switch {
	case errors.Is(err, cache.ErrInvalidated):
		return wire.ErrInvalidated
	case errors.Is(err, cache.ErrUnavailable):
		return wire.ErrUnavailable
	case errors.Is(err, cache.ErrRedisTimeout):
		return wire.ErrRedisTimeout
	case errors.Is(err, cache.ErrLeaseBusy):
		return wire.ErrLeaseBusy
	case errors.As(err, &pe):
		return wire.ErrPanic
	case errors.Is(err, cache.ErrClosed):
		return wire.ErrClosed
	case errors.Is(err, cache.ErrNotFound):
		return wire.ErrNotFound
	case errors.Is(err, cache.ErrSoftTimeout):
		return wire.ErrSoftTimeout
	case errors.Is(err, cache.ErrFailSafe):
		return wire.ErrFailSafe
	case errors.Is(err, errOrigin):
		return wire.ErrOrigin
	case errors.Is(err, errFallback):
		return wire.ErrFallback
	case errors.Is(err, cache.ErrComputeTimeout):
		return wire.ErrComputeTimeout
	case errors.Is(err, context.DeadlineExceeded):
		return wire.ErrDeadline
	case errors.Is(err, context.Canceled):
		return wire.ErrCanceled
	}
	return wire.ErrOther
}
