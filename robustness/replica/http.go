package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
	"github.com/stampede-go/stampede/robustness/wire"
)

// httpPath is the middleware path: a chi router on loopback whose route
// GET /v/{key} is cached by middleware.Cache in front of a handler that
// computes like fn does (told how by request headers, which are not part
// of the cache key; it revalidates with ETag and 304), and whose POST /v/{key}
// invalidates the entry fleet-wide (an unsafe method that succeeds, RFC 9111
// §4.4). The route tags its response with the surrogate keys of the
// request's X-Tags header (a Surrogate-Key header, read and removed by the
// middleware), and PURGE /purge (middleware.PurgeHandler) purges by
// surrogate key.
type httpPath struct {
	base string
	hc   *http.Client
	// arrived: when each attempt of each request (by X-Request) reached
	// the cache middleware, in Unix nanoseconds (see arrival).
	mu      sync.Mutex
	arrived map[string][]int64
}

// arrival records when each request reaches the cache middleware, each
// attempt of it (Go's transport sends a GET again when a panicking handler
// dropped the connection). It tells the checker which handler run the
// request may have joined (wire.Response.Arrived), better than when the
// replica sent it, which a loaded machine can hold up for milliseconds.
func (p *httpPath) arrival(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id, at := req.Header.Get("X-Request"), time.Now().UnixNano()
		p.mu.Lock()
		p.arrived[id] = append(p.arrived[id], at)
		p.mu.Unlock()
		next.ServeHTTP(w, req)
	})
}

// arrivals takes the arrivals recorded for request id.
func (p *httpPath) arrivals(id string) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.arrived[id]
	delete(p.arrived, id)
	return at
}

func startHTTP(r *replica, rdb redis.UniversalClient, opts cache.Options) (*httpPath, error) {
	opts.Namespace += "-http"
	responses, err := middleware.NewCache(rdb, opts)
	if err != nil {
		return nil, err
	}
	chi.RegisterMethod(middleware.MethodPurge) // before the router: chi answers 405 to methods it does not know
	router := chi.NewRouter()
	// The route caches per credential, varies on a language cookie, and
	// ignores an analytics cookie (wire.HTTPKey).
	route := middleware.CacheWithOptions(responses, middleware.Options{CacheAuthorized: true,
		VaryCookies: []string{"lang"}, IgnoreCookies: []string{"_ga*"}})
	p := &httpPath{hc: &http.Client{}, arrived: map[string][]int64{}}
	router.With(p.arrival, route).Get("/v/{key}", r.serveCompute)
	router.With(p.arrival, route).Post("/v/{key}", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	router.Handle("/purge", middleware.PurgeHandler(responses))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	p.base = "http://" + ln.Addr().String()
	return p, nil
}

// serveCompute is the route's handler: one compute, as the request's
// X-Compute header (a wire.Compute in JSON) says. Its response carries an
// ETag naming the value (compute ID and origin version), so that the
// middleware revalidates an expired entry with If-None-Match on the
// request path; Compute.Unchanged answers that with a 304 when the origin
// version has not moved (an "unchanged" compute, as fn's ErrUnchanged).
func (r *replica) serveCompute(w http.ResponseWriter, req *http.Request) {
	var c wire.Compute
	_ = json.Unmarshal([]byte(req.Header.Get("X-Compute")), &c)
	c.IgnoreContext = false // the route's handler honours its context (wire.Compute)
	id, _ := strconv.ParseInt(req.Header.Get("X-Request"), 10, 64)
	// A compute told to set a TTL answers, on the route, a response stale
	// on arrival (max-age=0): not stored, it answers only the requests
	// that joined its run and would select it.
	staleOnArrival := c.TTL > 0
	c.NotFound, c.Tags, c.TTL = false, nil, 0 // fn-only features
	// The value is made for the principal the handler sees: its key
	// names it (wire.HTTPKey).
	key := chi.URLParam(req, "key") + "|" + principalSeen(w, req)
	ctx := req.Context()
	if prev, ok := parseETag(req.Header.Get("If-None-Match"), key); ok {
		ctx = context.WithValue(ctx, httpPreviousKey{}, prev)
	}
	v, err := r.compute(ctx, wire.Request{ID: id, Compute: c}, key)
	switch {
	case errors.Is(err, cache.ErrUnchanged):
		w.Header().Set("ETag", req.Header.Get("If-None-Match"))
		w.WriteHeader(http.StatusNotModified)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// The value says which keys tagged it: the checker's purge rule reads
	// them from the answer.
	v.Tags = strings.Fields(req.Header.Get("X-Tags"))
	if len(v.Tags) > 0 {
		w.Header().Set(middleware.HeaderSurrogateKey, strings.Join(v.Tags, " "))
	}
	if staleOnArrival {
		w.Header().Set("Cache-Control", "max-age=0")
		v.Unstored = true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", fmt.Sprintf(`"%s@%d"`, v.ID, v.Version))
	_ = json.NewEncoder(w).Encode(v)
}

// principalSeen is the principal of the request the handler sees, in
// wire.HTTPKey's form. An analytics cookie the route ignores must be
// hidden from a cached run: seen there, it is named too, so the value
// reaches no request's key.
func principalSeen(w http.ResponseWriter, req *http.Request) string {
	var parts []string
	if auth := req.Header.Get("Authorization"); auth != "" {
		parts = append(parts, "auth="+strings.TrimPrefix(auth, "Bearer "))
	}
	if c, err := req.Cookie("_ga"); err == nil && w.Header().Get("X-Cache") != middleware.StatusBypass {
		parts = append(parts, "ga-seen="+c.Value)
	}
	if host := req.Header.Get("X-Forwarded-Host"); host != "" {
		parts = append(parts, "host="+host)
	}
	if c, err := req.Cookie("lang"); err == nil {
		parts = append(parts, "lang="+c.Value)
	}
	if c, err := req.Cookie("session"); err == nil {
		parts = append(parts, "session="+c.Value)
	}
	return strings.Join(parts, ";")
}

// principalHeaders sets on hr the headers of a wire.HTTPKey principal,
// and with noise an ignored analytics cookie and an X-Forwarded-For.
func principalHeaders(hr *http.Request, principal string, noise bool, id int64) {
	var cookies []string
	for _, part := range strings.Split(principal, ";") {
		name, value, _ := strings.Cut(part, "=")
		switch name {
		case "auth":
			hr.Header.Set("Authorization", "Bearer "+value)
		case "host":
			hr.Header.Set("X-Forwarded-Host", value)
		case "lang", "session":
			cookies = append(cookies, name+"="+value)
		}
	}
	if noise {
		cookies = append(cookies, fmt.Sprintf("_ga=GA1.%d", id))
		hr.Header.Set("X-Forwarded-For", fmt.Sprintf("192.0.2.%d", id%250))
	}
	if len(cookies) > 0 {
		hr.Header.Set("Cookie", strings.Join(cookies, "; "))
	}
}

// httpPreviousKey carries, in a handler run's context, the value the
// middleware's If-None-Match names.
type httpPreviousKey struct{}

// parseETag reads an ETag serveCompute made for key.
func parseETag(etag, key string) (wire.Value, bool) {
	id, version, ok := strings.Cut(strings.Trim(etag, `"`), "@")
	if !ok || !strings.HasPrefix(id, "c") {
		return wire.Value{}, false
	}
	n, err := strconv.ParseInt(version, 10, 64)
	if err != nil {
		return wire.Value{}, false
	}
	return wire.Value{Key: key, Src: "compute", ID: id, Version: n}, true
}

// previousValue is the value a compute may revalidate: the one the
// middleware's If-None-Match names (the HTTP route), else the cache's
// previous value (fn).
func previousValue(ctx context.Context, key string) (wire.Value, bool) {
	if v, ok := ctx.Value(httpPreviousKey{}).(wire.Value); ok && v.Key == key {
		return v, true
	}
	return cache.Previous[wire.Value](ctx, key)
}

// do runs an http-get or http-post request through the middleware, or an
// http-purge through the purge handler.
func (p *httpPath) do(ctx context.Context, req wire.Request) (resp wire.Response, err error) {
	if req.Op == wire.OpHTTPPurge {
		return p.purge(ctx, req)
	}
	method := http.MethodGet
	if req.Op == wire.OpHTTPPost {
		method = http.MethodPost
	}
	route, principal := wire.HTTPKey(req.Key)
	hr, err := http.NewRequestWithContext(ctx, method, p.base+"/v/"+route, nil)
	if err != nil {
		return resp, err
	}
	principalHeaders(hr, principal, req.Noise, req.ID)
	// One host name for the whole fleet, as behind a load balancer: the
	// host is part of the middleware's key.
	hr.Host = "stampede.robustness"
	c, _ := json.Marshal(req.Compute)
	hr.Header.Set("X-Compute", string(c))
	id := strconv.FormatInt(req.ID, 10)
	hr.Header.Set("X-Request", id)
	defer func() { resp.Arrived = p.arrivals(id) }()
	if len(req.Tags) > 0 {
		hr.Header.Set("X-Tags", strings.Join(req.Tags, " "))
	}
	res, err := p.hc.Do(hr)
	if errors.Is(err, io.EOF) && ctx.Err() == nil {
		// The request's own handler panicked: the middleware re-panics for
		// net/http's recovery, which drops the connection.
		return resp, &cache.PanicError{Value: "handler panicked: connection dropped"}
	}
	if err != nil {
		return resp, err
	}
	defer res.Body.Close()
	resp.Outcome = strings.ToLower(res.Header.Get("X-Cache"))
	switch {
	case res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "":
		// Every run of the request was purged while it ran (docs/http.md).
		return resp, fmt.Errorf("http: %s: %w", res.Status, cache.ErrInvalidated)
	case res.StatusCode >= 500:
		return resp, fmt.Errorf("%w: %s", errOrigin, res.Status)
	case method == http.MethodPost && res.StatusCode == http.StatusNoContent:
		return resp, nil
	case res.StatusCode != http.StatusOK:
		return resp, fmt.Errorf("http: unexpected %s", res.Status)
	}
	var v wire.Value
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		return resp, errors.Join(errors.New("http: body"), err, ctx.Err())
	}
	resp.Value = &v
	return resp, nil
}

// purge runs an http-purge: PURGE /purge with the request's tags as
// surrogate keys. A 503 says the purge is not guaranteed (Redis failed):
// cache.ErrUnavailable.
func (p *httpPath) purge(ctx context.Context, req wire.Request) (resp wire.Response, err error) {
	hr, err := http.NewRequestWithContext(ctx, middleware.MethodPurge, p.base+"/purge", nil)
	if err != nil {
		return resp, err
	}
	hr.Header.Set(middleware.HeaderSurrogateKey, strings.Join(req.Tags, " "))
	res, err := p.hc.Do(hr)
	if err != nil {
		return resp, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	switch res.StatusCode {
	case http.StatusOK:
		return resp, nil
	case http.StatusServiceUnavailable:
		return resp, fmt.Errorf("http: purge: %s: %w", bytes.TrimSpace(body), cache.ErrUnavailable)
	}
	return resp, fmt.Errorf("http: purge: unexpected %s: %s", res.Status, bytes.TrimSpace(body))
}
