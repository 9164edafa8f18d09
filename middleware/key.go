package middleware

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// Key returns the default cache key of r: the method class (HEAD shares
// GET's entries), host as sent, scheme (r.TLS), path (decoded and as sent, so that two requests
// share a key only where a router and the handler see the same path) and
// query as sent (a handler that reads the query raw sees exactly what the
// key holds), the forwarding headers a handler may build links from
// (forwardingHeaders; Forwarded's host and proto) when r carries them, and
// the values of the request headers named in vary, normalised as RFC 9111
// §4.1 allows (field lines combined, whitespace around commas dropped) and
// hashed, so that no credential or cookie reaches a Redis key name or a
// log. Parts are length-prefixed, so distinct requests never produce the
// same key.
func Key(r *http.Request, vary []string) string {
	var b strings.Builder
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	part := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	part(method)
	// The host as sent (a router matches host patterns as sent), and the
	// scheme the request came over.
	part(r.Host)
	if r.TLS != nil {
		part("https")
	} else {
		part("http")
	}
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	part(path)
	part(r.URL.RawPath)
	part(r.URL.RawQuery)
	for _, name := range forwardingHeaders {
		if values := r.Header.Values(name); len(values) > 0 {
			part(name)
			if name == "Forwarded" {
				part(forwardedHostProto(values))
			} else {
				part(fieldValue(values))
			}
		}
	}
	if len(vary) > 0 {
		part("") // the forwarding headers end here
	}
	for _, name := range vary {
		name = textproto.CanonicalMIMEHeaderKey(name)
		part(name)
		part(hashedValue(fieldValue(r.Header.Values(name))))
	}
	return b.String()
}

// forwardingHeaders are the request headers through which proxies tell a
// handler the host, scheme, port, prefix or path the client asked for, and
// which frameworks read to build absolute links and redirects: unkeyed, one
// request's value would poison the entry every other request is answered
// from ("Practical Web Cache Poisoning", Kettle 2018). The key includes
// them when present; behind a proxy that sets them, every request carries
// the same values and shares the same entries.
var forwardingHeaders = []string{
	"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Scheme",
	"X-Forwarded-Protocol", "X-Forwarded-Ssl", "X-Url-Scheme", "Front-End-Https",
	"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Forwarded-Uri",
	"X-Forwarded-Path", "X-Host", "X-Original-Host", "X-Original-Url", "X-Rewrite-Url",
	"X-Http-Method-Override",
}

// forwardedHostProto returns the host and proto parameters of a Forwarded
// header's elements, in order (RFC 7239): the parts a handler builds links
// from. Its for= and by= (the client's and the proxy's addresses, distinct
// for every client) are left out, or no two clients would share an entry.
func forwardedHostProto(lines []string) string {
	var b strings.Builder
	for _, line := range lines {
		for _, elem := range strings.Split(line, ",") {
			for _, pair := range strings.Split(elem, ";") {
				name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
				if name = strings.ToLower(strings.TrimSpace(name)); name == "host" || name == "proto" {
					b.WriteString(name + "=" + strings.TrimSpace(value) + ";")
				}
			}
			b.WriteByte(',')
		}
	}
	return b.String()
}

// hashedValue is the form in which a request header's value enters a key:
// a hash, so that the key of a variant keyed on a credential or a cookie
// holds neither (Redis key names show in MONITOR, SLOWLOG and logs).
func hashedValue(v string) string {
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// varyNames parses the Vary header values into canonical header names,
// sorted and deduplicated. star reports a "Vary: *".
func varyNames(h http.Header) (names []string, star bool) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			switch f {
			case "":
			case "*":
				star = true
			default:
				names = append(names, textproto.CanonicalMIMEHeaderKey(f))
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), star
}

// variantKey is the key of a variant: the key of the request with the vary
// names of its marker, in the marker's generation.
func variantKey(key, generation string) string {
	return key + strconv.Itoa(len(generation)) + ":" + generation
}

// fieldValue is a request header's field lines combined into one value
// with the optional whitespace around its commas removed: the form in
// which two requests' values match for Vary (RFC 9111 §4.1).
func fieldValue(lines []string) string {
	var b strings.Builder
	for i, line := range lines {
		for j, item := range strings.Split(line, ",") {
			if i > 0 || j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.Trim(item, " \t"))
		}
	}
	return b.String()
}
