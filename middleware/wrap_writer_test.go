package middleware

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The recorder with no client (a background refresh): nothing unwraps, and
// a flush fails and cancels the run, so a streaming handler ends.
func TestRecorderWithoutClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	rec := newRecorder(1<<10, nil, cancel, make(chan struct{}))
	rc := http.NewResponseController(rec)
	if err := rc.SetWriteDeadline(time.Time{}); !errors.Is(err, http.ErrNotSupported) {
		t.Fatalf("deadline before streaming: %v", err)
	}
	if err := rc.Flush(); !errors.Is(err, errNoClient) || ctx.Err() == nil {
		t.Fatalf("flush: %v, run cancelled: %v", err, ctx.Err())
	}
	if _, err := rec.Write([]byte("more")); !errors.Is(err, errNoClient) {
		t.Fatalf("write after: %v", err)
	}
	if _, err := rec.result(); err == nil {
		t.Fatal("a response with nowhere to stream has a result")
	}
}

// The recorder with a client: a flush streams the head and body to it, and
// unwraps to it. (1xx to a real client: TestEarlyHintsPassThroughOnly.)
func TestRecorderWithClient(t *testing.T) {
	client := httptest.NewRecorder()
	live := newLender(client, "X-Cache")
	rec := newRecorder(1<<10, live, func() {}, make(chan struct{}))
	rec.Header().Set("Content-Type", "text/event-stream")
	_, _ = rec.Write([]byte("data: 1\n\n"))
	if client.Body.Len() != 0 {
		t.Fatal("written before the flush")
	}
	if err := http.NewResponseController(rec).Flush(); err != nil {
		t.Fatal(err)
	}
	if rec.Unwrap() != client || client.Code != http.StatusOK || client.Body.String() != "data: 1\n\n" ||
		client.Header().Get("Content-Type") != "text/event-stream" || client.Header().Get("X-Cache") != "MISS" || !client.Flushed {
		t.Fatalf("streamed: %d %q %v flushed=%v", client.Code, client.Body, client.Header(), client.Flushed)
	}
	if live.takeBack() != rec {
		t.Fatal("the request does not know its writer streams")
	}
}
