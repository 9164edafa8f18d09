package middleware

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The storage rules: what RFC 9111 lets a shared cache store, and for how
// long. They are pure functions of a complete response and the time it was
// received; the handler plumbing applies their verdict.

// verdict is what the storage rules decide about a complete response.
type verdict struct {
	// reason says why the response is not stored; "" when it is.
	reason string
	// shareable: although not stored, the response may answer the other
	// requests that shared its handler run. A response that is not
	// shareable goes only to the request whose run produced it.
	shareable bool
	// failure: a 5xx, for which a stored response inside its
	// stale-if-error window may answer instead.
	failure bool
	// fresh is the freshness left (lifetime less current age); -1 means
	// the cache's TTL.
	fresh time.Duration
	// staleFor and staleIfError are the stale windows; -1 means the cache's.
	staleFor, staleIfError time.Duration
}

func notStorable(reason string, shareable bool) verdict {
	return verdict{reason: reason, shareable: shareable}
}

// storage applies the storage and freshness rules to resp, received at now.
// A 5xx that is not stored is a failure, for which a stored response may
// answer instead.
func (o *Options) storage(resp Response, now time.Time) verdict {
	v := o.storageRules(resp, now)
	if v.reason != "" && resp.Status >= 500 {
		v.failure = true
	}
	return v
}

// heuristicStatuses are the statuses a response may be stored with when it
// declares no freshness lifetime (RFC 9110 §15.1 "heuristically
// cacheable", less 206, which a plain GET does not store, and 501, a 5xx).
var heuristicStatuses = []int{200, 203, 204, 300, 301, 308, 404, 405, 410, 414}

func (o *Options) storageRules(resp Response, now time.Time) verdict {
	d := o.directives(resp.Header)
	_, star := varyNames(resp.Header)
	lifetime, declared := freshnessLifetime(d, resp.Header, now)
	// The rules that keep a response to one client come first, for every
	// status: a 5xx that carries a Set-Cookie, private or no-store is one
	// client's too, and goes to no request but its own.
	switch {
	case resp.Status == http.StatusNotModified || resp.Status == http.StatusPartialContent:
		// The shared run is a plain GET; a handler that answers it like
		// this answers one client's request, not the URL.
		return notStorable("status "+strconv.Itoa(resp.Status)+" to a plain GET", false)
	case d.noStore:
		return notStorable("Cache-Control: no-store", false) // §5.2.2.5
	case d.private:
		return notStorable("Cache-Control: private", false) // §5.2.2.7: not in a shared cache
	case d.noCache:
		return notStorable("Cache-Control: no-cache", false) // §5.2.2.4: each use needs validation
	case len(resp.Header.Values("Set-Cookie")) > 0:
		return notStorable("Set-Cookie", false) // one client's state (RFC 9111 §7.3)
	case star:
		return notStorable("Vary: *", false) // §4.1: always fails to match
	case resp.Status >= 500 && !declared:
		// An error without a freshness lifetime of its own is not the
		// URL's content (RFC 9111 §3 would allow storing it with one).
		return verdict{reason: "5xx", shareable: true}
	case len(o.Statuses) > 0 && !slices.Contains(o.Statuses, resp.Status):
		return notStorable("status "+strconv.Itoa(resp.Status), true)
	case len(o.Statuses) == 0 && !declared && !slices.Contains(heuristicStatuses, resp.Status):
		// Any status may be stored with an explicit lifetime (RFC 9111
		// §3); a heuristic one only for these (§4.2.2).
		return notStorable("status "+strconv.Itoa(resp.Status)+" without a declared lifetime", true)
	}
	v := verdict{fresh: -1}
	switch {
	case declared:
		v.fresh = lifetime - currentAge(resp.Header, now)
	case o.DeclaredFreshnessOnly:
		return notStorable("no declared freshness lifetime", true)
	case o.TTL > 0: // the route's heuristic lifetime (§4.2.2)
		v.fresh = o.TTL - currentAge(resp.Header, now)
	}
	if v.fresh != -1 && v.fresh < time.Millisecond {
		return notStorable("stale on arrival", true)
	}
	v.staleFor, v.staleIfError = o.staleWindows(d)
	return v
}

// staleWindows are the stale-while-revalidate and stale-if-error windows
// of a response with directives d; -1 means the cache's.
func (o *Options) staleWindows(d directives) (staleFor, staleIfError time.Duration) {
	staleFor, staleIfError = d.staleWhileRevalidate, d.staleIfError
	switch {
	case d.mustRevalidate || d.proxyRevalidate:
		// §5.2.2.2, §5.2.2.8: never served stale, not even on error.
		return 0, 0
	case d.sMaxAge >= 0 || o.DeclaredFreshnessOnly:
		// s-maxage implies proxy-revalidate (§5.2.2.10), and a standards
		// cache serves stale only with the origin's permission (§4.2.4):
		// only the response's own stale-while-revalidate/stale-if-error.
		return max(staleFor, 0), max(staleIfError, 0)
	}
	if staleFor < 0 && o.Stale > 0 {
		staleFor = o.Stale
	}
	if staleIfError < 0 && o.StaleIfError > 0 {
		staleIfError = o.StaleIfError
	}
	return staleFor, staleIfError
}

// freshnessLifetime is a shared cache's freshness lifetime of a response
// (RFC 9111 §4.2.1): s-maxage, else max-age, else Expires minus Date. An
// invalid Expires (or more than one) means already expired (§5.3).
// declared is false when the response names none of them.
func freshnessLifetime(d directives, h http.Header, now time.Time) (lifetime time.Duration, declared bool) {
	switch expires := h.Values("Expires"); {
	case d.sMaxAge >= 0:
		return d.sMaxAge, true
	case d.maxAge >= 0:
		return d.maxAge, true
	case len(expires) == 1:
		t, ok := parseHTTPDate(expires[0])
		if !ok {
			return 0, true
		}
		// Saturated like a delta-seconds lifetime (§1.2.2): past 2^31 s
		// a deadline reaches beyond what a time.Time counts in nanoseconds.
		return min(max(t.Sub(responseDate(h, now)), 0), maxDeltaSeconds*time.Second), true
	case len(expires) > 1:
		return 0, true
	}
	return 0, false
}

// responseDate is the response's Date, or now when it has no valid one.
func responseDate(h http.Header, now time.Time) time.Time {
	if t, ok := headerDate(h, "Date"); ok {
		return t
	}
	return now
}

// currentAge is the corrected initial age of a response received at now
// (RFC 9111 §4.2.3): the larger of its Age and now minus its Date. The
// handler runs in this process, so the response delay is nil.
func currentAge(h http.Header, now time.Time) time.Duration {
	apparent := max(now.Sub(responseDate(h, now)), 0)
	return max(apparent, ageValue(h))
}

// prepareForStorage sets what a stored response carries besides the
// handler's headers: its Date (when the handler set none, the time it was
// received), its age then in Age, and a content-hash ETag unless the
// handler set one or addETag is false.
func prepareForStorage(resp Response, now time.Time, addETag bool) Response {
	age := currentAge(resp.Header, now)
	if resp.Header.Get("Date") == "" {
		resp.Header.Set("Date", now.UTC().Format(http.TimeFormat))
	}
	if age >= time.Second {
		resp.Header.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
	} else {
		resp.Header.Del("Age")
	}
	if addETag && resp.Header.Get("ETag") == "" {
		resp.Header.Set("ETag", contentETag(resp.Body))
	}
	return resp
}

// contentETag is the strong ETag the middleware gives a body whose handler
// set none.
func contentETag(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
}

// hopByHop are the header fields a cache does not store (RFC 9110 §7.6.1,
// RFC 9111 §3.1), besides those that Connection names.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// connectionOptions are the header fields h's Connection names: they are
// hop-by-hop too (RFC 9110 §7.6.1), one connection's, and a cache stores
// none of them (`Connection: X-Backend-Session` would otherwise replay a
// backend's session header to every client).
func connectionOptions(h http.Header) []string {
	var names []string
	for _, line := range h.Values("Connection") {
		for _, f := range strings.Split(line, ",") {
			if f = strings.TrimSpace(f); f != "" {
				names = append(names, textproto.CanonicalMIMEHeaderKey(f))
			}
		}
	}
	return names
}

// dropHopByHop removes from h the hop-by-hop fields: hopByHop and the
// fields h's Connection names.
func dropHopByHop(h http.Header) {
	for _, name := range connectionOptions(h) {
		h.Del(name)
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// freshen updates a stored response with the header fields of a 304 that
// validated it (RFC 9111 §3.2, §4.3.4): each field of the 304 replaces the
// stored one, except Content-Length and the fields not stored at all. The
// status and body stay.
func freshen(stored, notModified Response) Response {
	out := Response{Status: stored.Status, Header: stored.Header.Clone(), Body: stored.Body}
	out.Header.Del("Age") // the 304's Date and Age (or the time of validation) are the new ones
	out.Header.Del("Date")
	// The 304 comes from a handler run, whose recorder already dropped the
	// fields its Connection named (dropHopByHop).
	for name, values := range notModified.Header {
		if name == "Content-Length" || slices.Contains(hopByHop, name) {
			continue
		}
		out.Header[name] = slices.Clone(values)
	}
	return out
}
