package middleware_test

// 103 Early Hints go to the live client whose request runs the handler
// only: never to requests that share the run, and never stored.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// Defect 5: a 103 Early Hints goes to the live client only; the final
// status and headers are stored, without the hint's Link.
func TestEarlyHintsPassThroughOnly(t *testing.T) {
	hinted := make(chan struct{})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		if n == 1 {
			parked(hinted) // the client has the hint before the handler goes on
		}
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Final", "yes")
		fmt.Fprint(w, "final body")
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	first, hints := fetchWithHints(t, srv.URL+"/hints", func() { close(hinted) })
	if len(hints) != 1 || hints[0] != "103 </app.css>; rel=preload" {
		t.Fatalf("hints to the live client: %q", hints)
	}
	if first.status != http.StatusOK || first.body != "final body" || first.header.Get("X-Final") != "yes" || first.header.Get("Link") != "" {
		t.Fatalf("first: %d %q %v", first.status, first.body, first.header)
	}
	second, hints := fetchWithHints(t, srv.URL+"/hints", nil)
	if len(hints) != 0 || second.header.Get("X-Cache") != "HIT" || second.status != http.StatusOK ||
		second.body != "final body" || second.header.Get("X-Final") != "yes" || second.header.Get("Link") != "" {
		t.Fatalf("stored: hints %q, %d %q %v", hints, second.status, second.body, second.header)
	}
}

// fetchWithHints GETs url, calling onHint on each 1xx, and returns the
// reply and the 1xx responses seen ("code Link").
func fetchWithHints(t *testing.T, url string, onHint func()) (reply, []string) {
	t.Helper()
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprint(code, " ", header.Get("Link")))
		if onHint != nil {
			onHint()
		}
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, url, nil)
	req.Host = host
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: string(b)}, hints
}

// 1xx responses go to the client whose request runs the handler, not to the
// requests that share the run.
func TestEarlyHintsNotToJoiners(t *testing.T) {
	h := &counting{release: make(chan struct{})}
	h.write = func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprint(w, "final")
	}
	hinting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		h.ServeHTTP(w, r) // parks until released
	})
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, hinting)
	hinted := make(chan struct{})
	var leader reply
	var leaderHints []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader, leaderHints = fetchWithHints(t, srv.URL+"/j", func() { close(hinted) })
	}()
	recv(t, hinted, "the leader's hint")
	joined := make(chan struct{})
	var joiner reply
	var joinerHints []string
	go func() {
		defer close(joined)
		joiner, joinerHints = fetchWithHints(t, srv.URL+"/j", nil)
	}()
	leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 2, 10*time.Second)
	close(h.release)
	recv(t, done, "the leader to be answered")
	recv(t, joined, "the joiner to be answered")
	if len(leaderHints) != 1 || leader.header.Get("X-Cache") != "MISS" || leader.body != "final" {
		t.Fatalf("leader: %q %s %q", leaderHints, leader.header.Get("X-Cache"), leader.body)
	}
	if len(joinerHints) != 0 || joiner.header.Get("X-Cache") != "SHARED" || joiner.body != "final" || joiner.header.Get("Link") != "" {
		t.Fatalf("joiner: %q %s %q %v", joinerHints, joiner.header.Get("X-Cache"), joiner.body, joiner.header)
	}
}
