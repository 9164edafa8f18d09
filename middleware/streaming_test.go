package middleware_test

// What streams is not stored: a handler that flushes streams to its client,
// a response over MaxBodyBytes streams to it and is not stored (nor a
// prefix of it when its client left), and a body of exactly MaxBodyBytes is
// still stored.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// Defect 8: a streaming handler can flush (http.Flusher and
// http.ResponseController); its response streams to its client as written
// and is not stored.
func TestFlushStreamsAndIsNotStored(t *testing.T) {
	read := make(chan struct{})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if _, ok := w.(http.Flusher); !ok {
			http.Error(w, "not a Flusher", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 3 {
			fmt.Fprintf(w, "data: run %d tick %d\n\n", n, i)
			if err := rc.Flush(); err != nil {
				panic(err)
			}
			// Streaming, the writer unwraps to the client's: a long stream
			// can lift the server's write deadline.
			if err := rc.SetWriteDeadline(time.Time{}); err != nil {
				panic(err)
			}
			select {
			case <-read: // the client read this tick before the next one is written
			case <-r.Context().Done():
				return
			}
		}
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for run := 1; run <= 2; run++ {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/events", nil)
		req.Host = host
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK || res.Header.Get("X-Cache") != "MISS" {
			t.Fatalf("run %d: %d %s", run, res.StatusCode, res.Header.Get("X-Cache"))
		}
		br := bufio.NewReader(res.Body)
		for i := range 3 {
			line, err := br.ReadString('\n')
			if err != nil || line != fmt.Sprintf("data: run %d tick %d\n", run, i) {
				t.Fatalf("run %d tick %d: %q %v", run, i, line, err)
			}
			_, _ = br.ReadString('\n')
			send(t, read, struct{}{}, "the handler to take the client's read")
		}
		if rest, _ := io.ReadAll(br); len(rest) != 0 {
			t.Fatalf("trailing %q", rest)
		}
		res.Body.Close()
	}
}

// Defect 9: with default options a body of MaxBodyBytes, and just below,
// is stored.
func TestBodyOfMaxBodyBytesIsStored(t *testing.T) {
	for _, size := range []int{1 << 20, 1<<20 - 16, 1<<20 - 100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
				_, _ = w.Write([]byte(strings.Repeat("y", size)))
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
			get(t, srv.URL+"/max", nil)
			if r := get(t, srv.URL+"/max", nil); r.header.Get("X-Cache") != "HIT" || len(r.body) != size {
				t.Fatalf("%s, %d bytes", r.header.Get("X-Cache"), len(r.body))
			}
		})
	}
}

// A response that must stream (here: over MaxBodyBytes) when its client
// has left has nowhere to go: the handler's writes fail and nothing (no
// prefix) is stored.
func TestStreamWithoutClientStoresNothing(t *testing.T) {
	big := strings.Repeat("0123456789", 10_000)
	var failed atomic.Int32
	h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
		for i := 0; i < len(big); i += 1000 {
			if _, err := io.WriteString(w, big[i:i+1000]); err != nil {
				failed.Add(1)
				return
			}
		}
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{MaxBodyBytes: 4096}, h)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/big", nil)
	req.Host = host
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1, 10*time.Second)
	cancel() // the client leaves before the handler writes
	recv(t, done, "the cancelled request to return")
	waitFramesGone(t, "middleware.(*handler).ServeHTTP(")
	close(h.release)
	waitFramesGone(t, "middleware_test.(*counting).ServeHTTP(")
	// The cache's load of that run ends after the handler does (it releases
	// the lease): a request joining it would share its unshareable outcome.
	waitFramesGone(t, "singleflight.(*Group).doCall(")
	if failed.Load() != 1 {
		t.Fatalf("the handler's writes did not fail: %d", failed.Load())
	}
	if r := get(t, srv.URL+"/big", nil); r.header.Get("X-Cache") != "MISS" || r.body != big {
		t.Fatalf("after: %s, %d bytes", r.header.Get("X-Cache"), len(r.body))
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
