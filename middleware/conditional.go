package middleware

// Conditional requests both ways: each request's own validators and ranges
// answered from a full response (write), and a stored response's
// validators sent to the handler when it is refreshed (conditional).

import (
	"bytes"
	"net/http"
	"strconv"
	"time"
)

// write sends a complete response to r. A 200 goes through
// http.ServeContent, which derives this request's own answer from the full
// response: 304 for a matching If-None-Match or If-Modified-Since, 206 for
// a Range, 412 for a failed If-Match or If-Unmodified-Since (RFC 9110 §13,
// §14). The shared handler run never sees those headers (see detach).
// resident is how long the response has been stored; Age adds it to the
// response's age when stored (RFC 9111 §4.2.3, §5.1).
func (h *handler) write(w http.ResponseWriter, r *http.Request, resp Response, status string, resident time.Duration) {
	hdr := w.Header()
	for k, v := range resp.Header {
		hdr[k] = v
	}
	age := ageValue(resp.Header) + resident
	if resident == 0 {
		// Just received (a miss, or a response not stored): its corrected
		// initial age, never the origin's Age rewritten.
		age = currentAge(resp.Header, time.Now())
	}
	hdr.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
	hdr.Set(h.opts.StatusHeader, status)
	if resp.Status == http.StatusOK && conditionalRequest(r) {
		var modified time.Time
		if t, ok := headerDate(resp.Header, "Last-Modified"); ok {
			modified = t
		}
		http.ServeContent(w, r, "", modified, bytes.NewReader(resp.Body))
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// conditionalRequest reports whether r has a header that can change its
// answer from the full response (see requestConditionals).
func conditionalRequest(r *http.Request) bool {
	for _, name := range requestConditionals {
		if _, ok := r.Header[name]; ok {
			return true
		}
	}
	return false
}

// conditional returns a copy of the detached request d that asks the
// handler to validate a stored response with the validators the handler
// gave it (not an ETag the middleware made up); validating is false, and
// d returned, when it has none.
func conditional(d *http.Request, stored Response) (c *http.Request, validating bool) {
	etag, lastModified := validators(stored)
	if etag == "" && lastModified == "" {
		return d, false
	}
	c = d.Clone(d.Context())
	if etag != "" {
		c.Header.Set("If-None-Match", etag)
	}
	if lastModified != "" {
		c.Header.Set("If-Modified-Since", lastModified)
	}
	return c, true
}

// validators returns the stored response's validators of the handler's
// own: its ETag unless the middleware made it, and its Last-Modified.
func validators(stored Response) (etag, lastModified string) {
	etag, lastModified = stored.Header.Get("ETag"), stored.Header.Get("Last-Modified")
	if etag != "" && etag == contentETag(stored.Body) {
		etag = ""
	}
	return etag, lastModified
}
