package middleware

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// invalidateTimeout bounds the invalidation of an unsafe request's URLs.
const invalidateTimeout = 5 * time.Second

// safeMethod reports whether a request method is safe (RFC 9110 §9.2.1).
func safeMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// passUnsafe passes an unsafe request (POST, PUT, PATCH, DELETE...) to the
// handler. When the handler answers with a non-error status (as
// Options.Invalidates decides), the stored
// responses for the request's URL, and for its Location and
// Content-Location on the same host, are deleted fleet-wide before that
// status goes out (RFC 9111 §4.4), so a client that reads after its write
// sees the new state.
func (h *handler) passUnsafe(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(h.opts.StatusHeader, StatusBypass)
	pt := &passThrough{ResponseWriter: w, onFinal: func(status int) {
		if h.opts.Invalidates(r, status) {
			h.invalidate(r, w.Header())
		}
	}}
	h.next.ServeHTTP(pt, r)
	if !pt.done { // the handler wrote nothing: net/http answers 200
		pt.done = true
		if h.opts.Invalidates(r, http.StatusOK) {
			h.invalidate(r, w.Header())
		}
	}
}

// invalidate deletes the entries of r's URL and of the same-host URLs its
// response names in Location and Content-Location. Deleting a URL's marker
// retires all its variants: they live under the marker's generation.
func (h *handler) invalidate(r *http.Request, respHeader http.Header) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), invalidateTimeout)
	defer cancel()
	base := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	targets := []*url.URL{base}
	for _, name := range []string{"Location", "Content-Location"} {
		if v := respHeader.Get(name); v != "" {
			if u, err := base.Parse(v); err == nil && strings.EqualFold(u.Host, base.Host) {
				targets = append(targets, u)
			}
		}
	}
	for _, u := range targets {
		g := r.WithContext(ctx)
		g.Method = http.MethodGet
		g.URL = &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
		if err := h.c.Delete(ctx, h.opts.Key(g, h.opts.VaryHeaders)); err != nil {
			h.logFailure(g, "entry not invalidated", err)
		}
	}
}
