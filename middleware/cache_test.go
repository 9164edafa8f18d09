package middleware_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Every wait of these tests is bounded, so that a breakage fails a test
// fast instead of hanging it until go test's timeout: a test goroutine's
// wait for a channel or a WaitGroup (waitBound, as long as the tests' waits
// for parked goroutines), a request (requestBound: it may include such a
// wait), and a handler parked until its test releases it (parkBound: past
// every bound of the test, so that a passing test never meets it, and a
// failed test's server still closes).
const (
	waitBound    = 30 * time.Second
	requestBound = 2 * waitBound
	parkBound    = 3 * waitBound
)

// client is the tests' HTTP client: http.DefaultClient with requestBound.
var client = &http.Client{Timeout: requestBound}

// recv receives from ch, failing the test after waitBound.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitBound):
	}
	t.Fatalf("not within %s: %s", waitBound, what)
	var zero T
	return zero
}

// send sends v on ch, failing the test after waitBound.
func send[T any](t testing.TB, ch chan<- T, v T, what string) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(waitBound):
		t.Fatalf("not within %s: %s", waitBound, what)
	}
}

// waitAll waits for wg, failing the test after waitBound.
func waitAll(t testing.TB, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recv(t, done, what)
}

// parked is a handler's wait for its test to release it, bounded by
// parkBound.
func parked(release <-chan struct{}) {
	select {
	case <-release:
	case <-time.After(parkBound):
	}
}

func newResponses(t *testing.T, rdb redis.UniversalClient, opts cache.Options) *cache.Cache[middleware.Response] {
	t.Helper()
	if opts.Namespace == "" {
		opts.Namespace = redistest.Prefix(t)
	}
	if opts.RedisTimeout == 0 {
		// The suite runs under the race detector on a shared 2-core machine,
		// where one Redis step can stall past the 100 ms default budget; the
		// budget itself is tested in cache/budget_test.go.
		opts.RedisTimeout = 2 * time.Second
	}
	c, err := middleware.NewCache(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serve starts a loopback server with handler behind the middleware.
func serve(t *testing.T, c *cache.Cache[middleware.Response], opts middleware.Options, handler http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(middleware.CacheWithOptions(c, opts)(handler))
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status int
	header http.Header
	body   string
}

// host is the Host every test request carries, as a fleet behind one
// load balancer sees it: the key includes the host, not the listener.
const host = "reports.example"

func get(t *testing.T, url string, hdr map[string]string) reply {
	t.Helper()
	return do(t, http.MethodGet, url, hdr)
}

func do(t *testing.T, method, url string, hdr map[string]string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return sendRequest(t, req, hdr)
}

// sendRequest sends req with the headers hdr and reads the whole reply.
func sendRequest(t *testing.T, req *http.Request, hdr map[string]string) reply {
	t.Helper()
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: string(b)}
}

// counting is a handler that counts its runs and answers with the count.
type counting struct {
	runs    atomic.Int32
	release chan struct{}
	write   func(w http.ResponseWriter, r *http.Request, n int32)
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	if c.release != nil {
		parked(c.release)
	}
	if c.write != nil {
		c.write(w, r, n)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "run %d for %s", n, r.URL.Path)
}

// 3 server instances sharing Redis, 300 concurrent requests for one expired
// URL: the handler runs once, every response has the same body, one says
// MISS and the rest SHARED or WAITED.
func TestStampedeAcrossInstances(t *testing.T) {
	ns := redistest.Prefix(t)
	h := &counting{release: make(chan struct{})}
	var urls []string
	for range 3 {
		c := newResponses(t, redistest.Client(t), cache.Options{Namespace: ns, TTL: time.Minute})
		urls = append(urls, serve(t, c, middleware.Options{}, h).URL)
	}
	const n = 300
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: requestBound}
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, urls[i%3]+"/reports/42", nil)
			req.Host = host
			res, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			replies[i] = reply{status: res.StatusCode, header: res.Header, body: string(b)}
		})
	}
	// Every request is parked in the cache before the handler may answer.
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", n, 30*time.Second)
	close(h.release)
	waitAll(t, &wg, "the requests to be answered")
	if runs := h.runs.Load(); runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}
	statuses := map[string]int{}
	for i, r := range replies {
		if r.status != http.StatusOK || r.body != "run 1 for /reports/42" {
			t.Fatalf("reply %d: %d %q", i, r.status, r.body)
		}
		statuses[r.header.Get("X-Cache")]++
	}
	// A replica whose leader takes the lease just after the fill released
	// it reads the fill back (HIT for its requests): still one run.
	if statuses["MISS"] != 1 || statuses["SHARED"]+statuses["WAITED"]+statuses["HIT"] != n-1 {
		t.Fatalf("status headers %v", statuses)
	}
	// And then it is a hit everywhere, with an Age.
	for _, u := range urls {
		r := get(t, u+"/reports/42", nil)
		if r.header.Get("X-Cache") != "HIT" || r.header.Get("Age") == "" || r.body != "run 1 for /reports/42" {
			t.Fatalf("after the storm: %v %q", r.header, r.body)
		}
	}
}

func TestKeyIgnoresQueryOrder(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	a := get(t, srv.URL+"/r?a=1&b=2", nil)
	b := get(t, srv.URL+"/r?b=2&a=1", nil)
	c := get(t, srv.URL+"/r?a=1&b=3", nil)
	if a.body != b.body || b.header.Get("X-Cache") != "HIT" {
		t.Fatalf("query order split the entry: %q %q %s", a.body, b.body, b.header.Get("X-Cache"))
	}
	if c.body == a.body || h.runs.Load() != 2 {
		t.Fatalf("distinct queries shared an entry: %q %q", a.body, c.body)
	}
}

func TestVaryValuesDoNotShareAnEntry(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprintf(w, "%s #%d", r.Header.Get("Accept-Language"), n)
	}}
	// Two instances: the learned Vary lives in Redis, not in one process.
	ns := redistest.Prefix(t)
	s1 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h)
	s2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h)
	en := get(t, s1.URL+"/p", map[string]string{"Accept-Language": "en"})
	fr := get(t, s2.URL+"/p", map[string]string{"Accept-Language": "fr"})
	en2 := get(t, s2.URL+"/p", map[string]string{"Accept-Language": "en"})
	fr2 := get(t, s1.URL+"/p", map[string]string{"Accept-Language": "fr"})
	if en.body != "en #1" || fr.body != "fr #2" || en2.body != "en #1" || fr2.body != "fr #2" {
		t.Fatalf("bodies %q %q %q %q", en.body, fr.body, en2.body, fr2.body)
	}
	if en.header.Get("X-Cache") != "MISS" || en2.header.Get("X-Cache") != "HIT" || fr2.header.Get("X-Cache") != "HIT" {
		t.Fatalf("statuses %s %s %s", en.header.Get("X-Cache"), en2.header.Get("X-Cache"), fr2.header.Get("X-Cache"))
	}
	if h.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", h.runs.Load())
	}
}

func TestConfiguredVaryHeaders(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{VaryHeaders: []string{"x-tenant"}}, h)
	a := get(t, srv.URL+"/p", map[string]string{"X-Tenant": "a"})
	b := get(t, srv.URL+"/p", map[string]string{"X-Tenant": "b"})
	a2 := get(t, srv.URL+"/p", map[string]string{"X-Tenant": "a"})
	if a.body == b.body || a2.body != a.body || h.runs.Load() != 2 {
		t.Fatalf("%q %q %q runs=%d", a.body, b.body, a2.body, h.runs.Load())
	}
}

// Responses that are private to a client are never served to another, not
// even to requests that were waiting on the same compute.
func TestPrivateResponsesAreNeverShared(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter, n int32){
		"set-cookie": func(w http.ResponseWriter, n int32) {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: fmt.Sprint("secret-", n)})
		},
		"no-store": func(w http.ResponseWriter, n int32) { w.Header().Set("Cache-Control", "no-store") },
		"private":  func(w http.ResponseWriter, n int32) { w.Header().Set("Cache-Control", "private, max-age=60") },
		"no-cache": func(w http.ResponseWriter, n int32) { w.Header().Set("Cache-Control", "no-cache") },
		"vary-*":   func(w http.ResponseWriter, n int32) { w.Header().Set("Vary", "*") },
	}
	for name, mark := range cases {
		t.Run(name, func(t *testing.T) {
			h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
				mark(w, n)
				fmt.Fprintf(w, "for client %s #%d", r.Header.Get("X-Client"), n)
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
			const n = 20
			replies := clientsOnOneRun(t, srv.URL+"/me", n, h.release)
			for i, r := range replies {
				if !strings.HasPrefix(r.body, fmt.Sprintf("for client %d #", i)) {
					t.Fatalf("client %d got %q", i, r.body)
				}
			}
			if runs := h.runs.Load(); runs != n {
				t.Fatalf("handler ran %d times for %d clients", runs, n)
			}
			after := get(t, srv.URL+"/me", map[string]string{"X-Client": "late"})
			if after.body != fmt.Sprintf("for client late #%d", n+1) {
				t.Fatalf("a private response was stored: %q", after.body)
			}
		})
	}
}

func TestAuthorizationPassesThrough(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	a := get(t, srv.URL+"/x", map[string]string{"Authorization": "Bearer alice"})
	b := get(t, srv.URL+"/x", map[string]string{"Authorization": "Bearer bob"})
	if a.body == b.body || a.header.Get("X-Cache") != "BYPASS" || h.runs.Load() != 2 {
		t.Fatalf("%q %q %s", a.body, b.body, a.header.Get("X-Cache"))
	}
	// Configured to cache them, they are.
	h2 := &counting{}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{CacheAuthorized: true}, h2)
	get(t, srv2.URL+"/x", map[string]string{"Authorization": "Bearer alice"})
	if r := get(t, srv2.URL+"/x", map[string]string{"Authorization": "Bearer alice"}); r.header.Get("X-Cache") != "HIT" {
		t.Fatalf("CacheAuthorized: %s", r.header.Get("X-Cache"))
	}
}

// RFC 9111 §5.2.1.5: nothing of a no-store request, or its response, is
// stored.
func TestRequestNoStorePassesThrough(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	if r := get(t, srv.URL+"/ns", map[string]string{"Cache-Control": "no-store"}); r.header.Get("X-Cache") != "BYPASS" {
		t.Fatalf("no-store request: %s", r.header.Get("X-Cache"))
	}
	if r := get(t, srv.URL+"/ns", nil); r.header.Get("X-Cache") != "MISS" || h.runs.Load() != 2 {
		t.Fatalf("after a no-store request: %s, %d runs", r.header.Get("X-Cache"), h.runs.Load())
	}
}

func TestOtherMethodsPassThrough(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for range 2 {
		if r := do(t, http.MethodPost, srv.URL+"/x", nil); r.header.Get("X-Cache") != "BYPASS" {
			t.Fatalf("POST: %s", r.header.Get("X-Cache"))
		}
	}
	if h.runs.Load() != 2 {
		t.Fatalf("runs %d", h.runs.Load())
	}
}

func TestETagAndNotModified(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	first := get(t, srv.URL+"/e", nil)
	etag := first.header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, "W/") {
		t.Fatalf("no strong ETag: %q", etag)
	}
	r := get(t, srv.URL+"/e", map[string]string{"If-None-Match": `"other", ` + etag})
	if r.status != http.StatusNotModified || r.body != "" || r.header.Get("ETag") != etag {
		t.Fatalf("304 expected: %d %q %v", r.status, r.body, r.header)
	}
	if r := get(t, srv.URL+"/e", map[string]string{"If-None-Match": `"other"`}); r.status != http.StatusOK || r.body != first.body {
		t.Fatalf("non-matching If-None-Match: %d", r.status)
	}
	// A handler's own ETag is kept.
	h2 := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("ETag", `"v7"`)
		fmt.Fprint(w, "body")
	}}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h2)
	if r := get(t, srv2.URL+"/e", nil); r.header.Get("ETag") != `"v7"` {
		t.Fatalf("handler ETag replaced: %q", r.header.Get("ETag"))
	}
	if r := get(t, srv2.URL+"/e", map[string]string{"If-None-Match": `W/"v7"`}); r.status != http.StatusNotModified {
		t.Fatalf("weak match: %d", r.status)
	}
}

func TestHeadServedFromGetEntry(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	g := get(t, srv.URL+"/h", nil)
	head := do(t, http.MethodHead, srv.URL+"/h", nil)
	if head.body != "" || head.header.Get("X-Cache") != "HIT" || head.header.Get("Content-Length") != fmt.Sprint(len(g.body)) {
		t.Fatalf("HEAD: %q %v", head.body, head.header)
	}
	// A HEAD miss stores the GET body for later GETs.
	h2 := &counting{}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h2)
	do(t, http.MethodHead, srv2.URL+"/h", nil)
	if r := get(t, srv2.URL+"/h", nil); r.header.Get("X-Cache") != "HIT" || r.body != "run 1 for /h" {
		t.Fatalf("GET after HEAD miss: %s %q", r.header.Get("X-Cache"), r.body)
	}
}

func TestOversizedBodyStreamedAndNotStored(t *testing.T) {
	big := strings.Repeat("0123456789", 10_000) // 100 kB
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		for i := 0; i < len(big); i += 1000 {
			if _, err := io.WriteString(w, big[i:i+1000]); err != nil {
				return
			}
		}
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{MaxBodyBytes: 4096}, h)
	for i := range 2 {
		r := get(t, srv.URL+"/big", nil)
		if r.status != http.StatusOK || r.body != big || r.header.Get("X-Cache") != "MISS" {
			t.Fatalf("request %d: %d, %d bytes, %s", i, r.status, len(r.body), r.header.Get("X-Cache"))
		}
	}
	if h.runs.Load() != 2 {
		t.Fatalf("an oversized body was stored: %d runs", h.runs.Load())
	}
}

func TestPanicAnd500StoreNothing(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if fail.Load() {
			if r.URL.Path == "/panic" {
				panic("handler exploded")
			}
			http.Error(w, "upstream down", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "ok #%d", n)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	if r := get(t, srv.URL+"/500", nil); r.status != http.StatusInternalServerError {
		t.Fatalf("500 route: %d", r.status)
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic is expected
	preq, _ := http.NewRequest(http.MethodGet, srv.URL+"/panic", nil)
	preq.Host = host
	res, err := client.Do(preq)
	if err == nil { // the server aborts the connection of a panicking handler
		res.Body.Close()
		if res.StatusCode < 500 {
			t.Fatalf("panic route answered %d", res.StatusCode)
		}
	}
	fail.Store(false)
	for _, p := range []string{"/500", "/panic"} {
		if r := get(t, srv.URL+p, nil); r.status != http.StatusOK || r.header.Get("X-Cache") != "MISS" {
			t.Fatalf("%s after the failure: %d %s: the failure was stored", p, r.status, r.header.Get("X-Cache"))
		}
	}
}

func TestCacheControlSetsTTLAndStaleWindows(t *testing.T) {
	rdb := redistest.Client(t)
	c := newResponses(t, rdb, cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, headerHandler)
	checkKeptFor(t, rdb, c, srv.URL+"/cc", []keptCase{
		{"max-age=5", 4 * time.Second, 5 * time.Second},
		{"max-age=5, s-maxage=20", 19 * time.Second, 20 * time.Second},
		{"max-age=5, stale-while-revalidate=10", 14 * time.Second, 15 * time.Second},
		{"max-age=5, stale-if-error=100", 104 * time.Second, 105 * time.Second},
		{"public", 59 * time.Minute, time.Hour},
	})
	// max-age=0 is not stored.
	url := withHeaders(srv.URL+"/cc0", "Cache-Control: max-age=0")
	get(t, url, nil)
	if r := get(t, url, nil); r.header.Get("X-Cache") != "MISS" {
		t.Fatalf("max-age=0 stored: %s", r.header.Get("X-Cache"))
	}
}

func TestOnlyConfiguredStatusesStored(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		w.WriteHeader(code)
		fmt.Fprintf(w, "#%d", n)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for code, stored := range map[int]bool{200: true, 404: true, 410: true, 301: true, 302: false, 400: false, 503: false} {
		get(t, fmt.Sprint(srv.URL, "/", code), nil)
		second := get(t, fmt.Sprint(srv.URL, "/", code), nil)
		if got := second.header.Get("X-Cache") == "HIT"; got != stored || second.status != code {
			t.Errorf("status %d: stored=%v (%s), want %v", code, got, second.header.Get("X-Cache"), stored)
		}
	}
}

// A 5xx with stale-if-error is answered with the stale response.
func TestStaleIfErrorAnswers5xx(t *testing.T) {
	var fail atomic.Bool
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Cache-Control", "stale-if-error=3600")
		fmt.Fprint(w, "good")
	}}
	// Fresh for the route's 1ms: no waiting for a TTL.
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{TTL: time.Millisecond}, h)
	if r := get(t, srv.URL+"/s", nil); r.body != "good" {
		t.Fatal(r.body)
	}
	fail.Store(true)
	r := get(t, srv.URL+"/s", nil)
	for r.header.Get("X-Cache") == "HIT" { // within the millisecond
		r = get(t, srv.URL+"/s", nil)
	}
	if r.status != http.StatusOK || r.body != "good" || r.header.Get("X-Cache") != "STALE" {
		t.Fatalf("%d %q %s", r.status, r.body, r.header.Get("X-Cache"))
	}
}

// A client that disconnects mid-handler does not poison the entry: the
// handler finishes and its response is stored.
func TestClientDisconnectStillStores(t *testing.T) {
	h := &counting{release: make(chan struct{})}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/d", nil)
	req.Host = host
	done := make(chan error)
	go func() {
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1, 10*time.Second)
	cancel()
	if err := recv(t, done, "the cancelled request to return"); err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	close(h.release)
	waitHit := time.Now().Add(10 * time.Second)
	for {
		r := get(t, srv.URL+"/d", nil)
		if r.header.Get("X-Cache") == "HIT" && r.body == "run 1 for /d" {
			break
		}
		if r.header.Get("X-Cache") == "MISS" || time.Now().After(waitHit) {
			t.Fatalf("after the disconnect: %s %q", r.header.Get("X-Cache"), r.body)
		}
		time.Sleep(time.Millisecond) // the abandoned handler finishes in the background
	}
}

func TestChiRouteLevel(t *testing.T) {
	h := &counting{}
	c := newResponses(t, redistest.Client(t), cache.Options{})
	r := chi.NewRouter()
	r.With(middleware.Cache(c)).Get("/reports/{id}", h.ServeHTTP)
	r.Get("/live", h.ServeHTTP)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	get(t, srv.URL+"/reports/1", nil)
	if got := get(t, srv.URL+"/reports/1", nil); got.header.Get("X-Cache") != "HIT" {
		t.Fatalf("cached route: %s", got.header.Get("X-Cache"))
	}
	get(t, srv.URL+"/live", nil)
	if got := get(t, srv.URL+"/live", nil); got.header.Get("X-Cache") != "" || h.runs.Load() != 3 {
		t.Fatalf("uncached route: %q runs=%d", got.header.Get("X-Cache"), h.runs.Load())
	}
}

func TestNilCachePassesThrough(t *testing.T) {
	h := &counting{}
	srv := httptest.NewServer(middleware.Cache(nil)(h))
	t.Cleanup(srv.Close)
	if r := get(t, srv.URL+"/x", nil); r.header.Get("X-Cache") != "BYPASS" {
		t.Fatal(r.header)
	}
}

// clientsOnOneRun sends n concurrent requests for url, client i with
// X-Client: i, and releases the handler once all of them wait in the cache.
func clientsOnOneRun(t *testing.T, url string, n int, release chan struct{}) []reply {
	t.Helper()
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = get(t, url, map[string]string{"X-Client": fmt.Sprint(i)}) })
	}
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", n, 10*time.Second)
	close(release)
	waitAll(t, &wg, "the requests to be answered")
	return replies
}

// A URL too long for the cache's MaxKeyBytes is answered by the handler,
// not with an error.
func TestKeyTooLongBypasses(t *testing.T) {
	h := &counting{}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{MaxKeyBytes: 64}), middleware.Options{}, h)
	r := get(t, srv.URL+"/long?q="+strings.Repeat("a", 100), nil)
	if r.status != http.StatusOK || r.header.Get("X-Cache") != "BYPASS" || !strings.HasPrefix(r.body, "run 1 ") {
		t.Fatalf("%d %s %q", r.status, r.header.Get("X-Cache"), r.body)
	}
}
