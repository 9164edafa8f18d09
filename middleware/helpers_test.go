package middleware_test

// What the tests of the package share: TestMain, the bounded waits, a
// cache and a loopback server behind the middleware, the requests and their
// replies, and a handler that counts its runs.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	return readReply(t, res)
}

// readReply reads res whole and closes its body.
func readReply(t *testing.T, res *http.Response) reply {
	t.Helper()
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

// clientsOnOneRun sends n concurrent requests for url, client i with
// X-Client: i, and releases the handler once all of them wait in the cache.
func clientsOnOneRun(t *testing.T, url string, n int, release chan struct{}) []reply {
	t.Helper()
	hdrs := make([]map[string]string, n)
	for i := range hdrs {
		hdrs[i] = map[string]string{"X-Client": fmt.Sprint(i)}
	}
	return requestsOnOneRun(t, url, hdrs, release)
}

// requestsOnOneRun sends concurrent requests for url, request i with the
// headers hdrs[i], and releases the handler once all of them wait in the
// cache.
func requestsOnOneRun(t *testing.T, url string, hdrs []map[string]string, release chan struct{}) []reply {
	t.Helper()
	replies := make([]reply, len(hdrs))
	var wg sync.WaitGroup
	for i, hdr := range hdrs {
		wg.Go(func() { replies[i] = get(t, url, hdr) })
	}
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", len(hdrs), 10*time.Second)
	close(release)
	waitAll(t, &wg, "the requests to be answered")
	return replies
}

// rawGet sends "GET target" to the server at base over a connection of its
// own, with the request line exactly as given (no client re-encodes it),
// the test Host and the headers hdr, and reads the reply.
func rawGet(t *testing.T, base, target string, hdr ...string) reply {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), waitBound)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(requestBound))
	msg := "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	for i := 0; i+1 < len(hdr); i += 2 {
		msg += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	if _, err := io.WriteString(conn, msg+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return readReply(t, res)
}
