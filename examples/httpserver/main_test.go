package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/internal/syncbuf"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The example starts, serves, stops a stampede on its expensive route, and
// shuts down cleanly.
func TestServerStartsServesAndShutsDown(t *testing.T) {
	getenv := redistest.Getenv(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var logs syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-delay", "50ms"}, &logs, getenv, ready) }()
	var base string
	select {
	case a := <-ready:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("server did not start: %v\n%s", err, logs.String())
	}
	if first := strings.SplitN(logs.String(), "\n", 2)[0]; !strings.Contains(first, "REDIS_URL") {
		t.Fatalf("first log line does not say which Redis: %q", first)
	}
	body := func(path string) string {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	if got := body("/healthz"); got != "ok\n" {
		t.Fatalf("healthz: %q", got)
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { body("/reports/7") })
	}
	wg.Wait()
	var st StatsBody
	if err := json.Unmarshal([]byte(body("/stats")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Executions != 1 || st.Misses != 1 || st.Hits+st.Shared+st.Waited != 49 {
		t.Fatalf("stats after 50 concurrent requests: %+v", st)
	}
	metrics := body("/metrics")
	for _, series := range []string{
		`stampede_requests_total{namespace="httpserver",outcome="miss"} 1`,
		`stampede_lease_acquired_total{namespace="httpserver"} 1`,
		"stampede_compute_seconds_count",
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	// HEAD is answered from the GET entry.
	head, err := http.Head(base + "/reports/7")
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	if head.StatusCode != http.StatusOK || head.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("HEAD: %d %s", head.StatusCode, head.Header.Get("X-Cache"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Fatalf("no clean stop in the logs:\n%s", logs.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-delay", "-1s"}, {"-nope"}} {
		if err := run(context.Background(), args, io.Discard, func(string) string { return "" }, nil); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
