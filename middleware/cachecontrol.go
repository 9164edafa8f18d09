package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// directives are the Cache-Control response directives the middleware acts on.
type directives struct {
	noStore, private, noCache bool
	maxAge, sMaxAge           time.Duration // -1 when absent
	staleWhileRevalidate      time.Duration // -1 when absent
	staleIfError              time.Duration // -1 when absent
}

func parseCacheControl(h http.Header) directives {
	d := directives{maxAge: -1, sMaxAge: -1, staleWhileRevalidate: -1, staleIfError: -1}
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
			case "max-age":
				d.maxAge = seconds(value)
			case "s-maxage":
				d.sMaxAge = seconds(value)
			case "stale-while-revalidate":
				d.staleWhileRevalidate = seconds(value)
			case "stale-if-error":
				d.staleIfError = seconds(value)
			}
		}
	}
	return d
}

// seconds parses a delta-seconds value; -1 when malformed.
func seconds(s string) time.Duration {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	const maxSeconds = int64(1<<63-1) / int64(time.Second)
	return time.Duration(min(n, maxSeconds)) * time.Second
}

// ttl is the shared-cache freshness lifetime: s-maxage over max-age; -1 when
// the response names neither.
func (d directives) ttl() time.Duration {
	if d.sMaxAge >= 0 {
		return d.sMaxAge
	}
	return d.maxAge
}
