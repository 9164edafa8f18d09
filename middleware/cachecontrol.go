package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// directives are the Cache-Control response directives the middleware acts on.
type directives struct {
	noStore, private, noCache       bool
	mustRevalidate, proxyRevalidate bool
	maxAge, sMaxAge                 time.Duration // -1 when absent; 0 when invalid (stale)
	staleWhileRevalidate            time.Duration // -1 when absent or invalid
	staleIfError                    time.Duration // -1 when absent or invalid
}

func parseCacheControl(h http.Header) directives {
	d := directives{maxAge: -1, sMaxAge: -1, staleWhileRevalidate: -1, staleIfError: -1}
	// The first occurrence of a directive counts (RFC 9111 §4.2.1).
	first := func(dst *time.Duration, v time.Duration) {
		if *dst == -1 {
			*dst = v
		}
	}
	for _, line := range h.Values("Cache-Control") {
		for _, part := range strings.Split(line, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(part), "=")
			name = strings.ToLower(strings.TrimSpace(name))
			value = strings.Trim(strings.TrimSpace(value), `"`)
			switch name {
			case "no-store":
				d.noStore = true
			case "private":
				d.private = true
			case "no-cache":
				d.noCache = true
			case "must-revalidate":
				d.mustRevalidate = true
			case "proxy-revalidate":
				d.proxyRevalidate = true
			case "max-age":
				first(&d.maxAge, max(seconds(value), 0)) // an invalid lifetime makes the response stale
			case "s-maxage":
				first(&d.sMaxAge, max(seconds(value), 0))
			case "stale-while-revalidate":
				first(&d.staleWhileRevalidate, seconds(value))
			case "stale-if-error":
				first(&d.staleIfError, seconds(value))
			}
		}
	}
	return d
}

// maxDeltaSeconds is where a delta-seconds value saturates (RFC 9111
// §1.2.2: 2^31 or the greatest integer the cache can represent).
const maxDeltaSeconds = 1 << 31

// seconds parses a delta-seconds value, saturating at 2^31 s; -1 when
// malformed.
func seconds(s string) time.Duration {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxDeltaSeconds { // only a range error is left: the value overflowed
		n = maxDeltaSeconds
	}
	return time.Duration(n) * time.Second
}
