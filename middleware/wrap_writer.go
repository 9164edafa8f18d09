package middleware

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/textproto"
	"sync"
)

// errNoClient fails the writes of a run whose response streams (it was
// flushed, or outgrew MaxBodyBytes) when no client waits for it: a
// background refresh, or a client that left.
var errNoClient = errors.New("middleware: streamed response has no client to go to")

// recorder is the http.ResponseWriter of a detached handler run. It records
// the final status, headers and body; it passes 1xx interim responses to
// the run's live client, if any, and never records them; a response that is
// flushed, or outgrows the body limit, streams to that client from then on
// and is not stored. It implements http.Flusher and Unwrap, so
// http.NewResponseController works on it.
type recorder struct {
	limit  int
	live   *lender            // the client waiting on this run; nil for a background run
	cancel context.CancelFunc // cancels the handler's context
	done   <-chan struct{}    // closed when the handler has returned

	mu        sync.Mutex
	header    http.Header
	sent      http.Header // header snapshot at the final WriteHeader
	status    int
	body      bytes.Buffer
	panicked  *handlerPanic
	out       http.ResponseWriter // the client's writer once streaming
	err       error               // writes fail with it (errNoClient, or the run was abandoned)
	streaming chan struct{}       // closed when the response starts streaming
}

func newRecorder(limit int, live *lender, cancel context.CancelFunc, done <-chan struct{}) *recorder {
	return &recorder{limit: limit, live: live, cancel: cancel, done: done,
		header: make(http.Header), streaming: make(chan struct{})}
}

// Header implements http.ResponseWriter.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader implements http.ResponseWriter. A 1xx goes to the live
// client only.
func (rec *recorder) WriteHeader(status int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		if rec.status == 0 && rec.err == nil {
			rec.live.interim(status, rec.header)
		}
		return
	}
	rec.writeHeaderLocked(status)
}

func (rec *recorder) writeHeaderLocked(status int) {
	if rec.status != 0 {
		return
	}
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	rec.status = status
	rec.sent = rec.header.Clone()
}

// Write implements http.ResponseWriter.
func (rec *recorder) Write(p []byte) (int, error) {
	rec.mu.Lock()
	rec.writeHeaderLocked(http.StatusOK)
	if rec.out == nil && rec.err == nil && rec.body.Len()+len(p) <= rec.limit {
		defer rec.mu.Unlock()
		return rec.body.Write(p)
	}
	out, err := rec.streamLocked()
	rec.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return out.Write(p)
}

// Flush implements http.Flusher: the response streams to its client from
// now on and is not stored.
func (rec *recorder) Flush() { _ = rec.FlushError() }

// FlushError is Flush, reporting a response that has no client to go to;
// http.ResponseController.Flush calls it.
func (rec *recorder) FlushError() error {
	rec.mu.Lock()
	rec.writeHeaderLocked(http.StatusOK)
	out, err := rec.streamLocked()
	rec.mu.Unlock()
	if err != nil {
		return err
	}
	return http.NewResponseController(out).Flush()
}

// Unwrap returns the client's ResponseWriter once the response streams to
// it, and nil before: until then nothing is sent, and
// http.ResponseController's deadlines and Hijack report
// http.ErrNotSupported.
func (rec *recorder) Unwrap() http.ResponseWriter {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.out
}

// streamLocked turns the recording into a stream to the live client: the
// head and what was buffered go out, and the rest follows as written.
func (rec *recorder) streamLocked() (http.ResponseWriter, error) {
	if rec.out != nil || rec.err != nil {
		return rec.out, rec.err
	}
	out := rec.live.claim(rec)
	if out == nil {
		rec.err = errNoClient
		rec.cancel()
		return nil, rec.err
	}
	hdr := out.Header()
	for k, v := range rec.sent {
		hdr[k] = v
	}
	out.WriteHeader(rec.status)
	rec.out = out
	close(rec.streaming)
	if rec.body.Len() > 0 {
		if _, err := out.Write(rec.body.Bytes()); err != nil {
			rec.err = err
			return nil, err
		}
	}
	rec.body = bytes.Buffer{}
	return out, nil
}

// abandon makes every later write fail: the run took too long and its
// result is no longer wanted. It reports whether the response already
// streams (and then goes on to its client).
func (rec *recorder) abandon(err error) (streaming bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.out != nil {
		return true
	}
	if rec.err == nil {
		rec.err = err
	}
	rec.cancel()
	return false
}

// finish records the handler's panic.
func (rec *recorder) finish(p *handlerPanic) {
	rec.mu.Lock()
	rec.panicked = p
	rec.mu.Unlock()
}

// result is the recorded response, or why there is none: it streamed to
// the client (or had no client to stream to), or the handler panicked.
// Call it once the handler has returned or the response streams.
func (rec *recorder) result() (Response, error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch {
	case rec.out != nil:
		return Response{}, &notStored{reason: "streamed to its client"}
	case rec.err != nil:
		// What was recorded is only a prefix: the rest had nowhere to go.
		return Response{}, &notStored{reason: "streamed, with no client to stream to"}
	case rec.panicked != nil:
		return Response{}, rec.panicked
	}
	status, hdr := rec.status, rec.sent
	if status == 0 { // the handler wrote nothing
		status, hdr = http.StatusOK, rec.header.Clone()
	}
	hdr = canonicalHeader(hdr)
	dropHopByHop(hdr)
	return Response{Status: status, Header: hdr, Body: bytes.Clone(rec.body.Bytes())}, nil
}

// waitStreamed waits for the handler whose response streams to the
// client to return, cancelling it if the client leaves first. A handler
// that panicked mid-stream aborts the connection: the body is cut.
func (rec *recorder) waitStreamed(ctx context.Context) {
	select {
	case <-rec.done:
	case <-ctx.Done():
		rec.cancel()
		<-rec.done
	}
	rec.mu.Lock()
	p := rec.panicked
	rec.mu.Unlock()
	if p != nil {
		panic(http.ErrAbortHandler)
	}
}

// lender lends the ResponseWriter of a request waiting on a fetch to the
// handler run of that fetch: for 1xx interim responses, and for the whole
// response once it streams. The request takes it back when its fetch
// returns; from then on the run has no client. A nil *lender lends nothing.
type lender struct {
	statusHeader string
	gone         chan struct{} // closed when the request takes its writer back

	mu      sync.Mutex
	w       http.ResponseWriter // nil once taken back or claimed
	claimed *recorder           // the run whose response streams to the client
	back    bool
}

// newLender lends w, the writer of a request whose status header is
// statusHeader.
func newLender(w http.ResponseWriter, statusHeader string) *lender {
	return &lender{w: w, statusHeader: statusHeader, gone: make(chan struct{})}
}

// interim writes a 1xx with the handler's current header fields to the
// client, leaving the client's header map as it was.
func (l *lender) interim(status int, fields http.Header) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return
	}
	hdr := l.w.Header()
	saved := make(http.Header, len(fields))
	for k, v := range fields {
		if old, ok := hdr[k]; ok {
			saved[k] = old
		}
		hdr[k] = v
	}
	l.w.WriteHeader(status)
	for k := range fields {
		if old, ok := saved[k]; ok {
			hdr[k] = old
		} else {
			delete(hdr, k)
		}
	}
}

// claim hands the client's writer to a run whose response streams.
func (l *lender) claim(rec *recorder) http.ResponseWriter {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.w
	if w != nil {
		l.w, l.claimed = nil, rec
		w.Header().Set(l.statusHeader, StatusMiss)
	}
	return w
}

// takeBack ends the loan; it returns the run streaming its response to the
// client, if one claimed it (the request must wait for it to end).
func (l *lender) takeBack() *recorder {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w = nil
	if !l.back {
		l.back = true
		close(l.gone)
	}
	return l.claimed
}

// passThrough is the ResponseWriter of a request that goes straight to the
// handler: it calls onFinal with the final status before it is written,
// and is otherwise the client's writer (Flush and Unwrap included).
type passThrough struct {
	http.ResponseWriter
	onFinal func(status int)
	done    bool
}

// WriteHeader implements http.ResponseWriter.
func (p *passThrough) WriteHeader(status int) {
	if !p.done && (status < 100 || status >= 200 || status == http.StatusSwitchingProtocols) {
		p.done = true
		p.onFinal(status)
	}
	p.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (p *passThrough) Write(b []byte) (int, error) {
	if !p.done {
		p.WriteHeader(http.StatusOK)
	}
	return p.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (p *passThrough) Flush() {
	if !p.done {
		p.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(p.ResponseWriter).Flush()
}

// Unwrap returns the client's writer, for http.ResponseController.
func (p *passThrough) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// canonicalHeader returns h with every field under its canonical name: a
// handler that writes h["set-cookie"] sends it to its client as
// Set-Cookie, and the storage rules, which look fields up canonically, must
// see it too.
func canonicalHeader(h http.Header) http.Header {
	for name := range h {
		if textproto.CanonicalMIMEHeaderKey(name) != name {
			out := make(http.Header, len(h))
			for k, v := range h {
				ck := textproto.CanonicalMIMEHeaderKey(k)
				out[ck] = append(out[ck], v...)
			}
			return out
		}
	}
	return h
}
