package middleware_test

// One handler run per expired URL: across replicas sharing Redis, every
// request is answered by the one run, and a run whose client left still
// stores its response.

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

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
