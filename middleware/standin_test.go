package middleware

import (
	"net/http"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// Whether a kept response answers for a failed handler run, on a fixed
// clock: inside its own stale windows yes; past them only a standards cache
// (DeclaredFreshnessOnly) whose origin was unreachable, and never with
// must-revalidate, proxy-revalidate or s-maxage (RFC 9111 §4.2.4,
// §5.2.2.2, §5.2.2.8, §5.2.2.10).
func TestKeptResponseStandsInOnlyWhereAllowed(t *testing.T) {
	storedAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const s = time.Second
	c, err := NewCache(nil, cache.Options{Namespace: "standin", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, tc := range []struct {
		name        string
		cc          string
		opts        Options
		after       time.Duration // since stored
		unreachable bool
		want        bool
	}{
		{"standards: fresh", "max-age=60", Options{DeclaredFreshnessOnly: true}, 30 * s, false, true},
		{"standards: stale, origin answered 500", "max-age=60", Options{DeclaredFreshnessOnly: true}, 90 * s, false, false},
		{"standards: stale, origin unreachable", "max-age=60", Options{DeclaredFreshnessOnly: true}, 90 * s, true, true},
		{"standards: inside stale-if-error", "max-age=60, stale-if-error=60", Options{DeclaredFreshnessOnly: true}, 90 * s, false, true},
		{"standards: past stale-if-error", "max-age=60, stale-if-error=60", Options{DeclaredFreshnessOnly: true}, 150 * s, false, false},
		{"standards: must-revalidate", "max-age=60, must-revalidate", Options{DeclaredFreshnessOnly: true}, 90 * s, true, false},
		{"standards: proxy-revalidate", "max-age=60, proxy-revalidate", Options{DeclaredFreshnessOnly: true}, 90 * s, true, false},
		{"standards: s-maxage", "s-maxage=60", Options{DeclaredFreshnessOnly: true}, 90 * s, true, false},
		{"application: inside the route's StaleIfError", "max-age=60", Options{StaleIfError: time.Minute}, 90 * s, false, true},
		{"application: past it, even unreachable", "max-age=60", Options{StaleIfError: time.Minute}, 150 * s, true, false},
		{"application: the route's TTL", "", Options{TTL: 10 * s, StaleIfError: 10 * s}, 15 * s, false, true},
		{"application: past the route's TTL and window", "", Options{TTL: 10 * s, StaleIfError: 10 * s}, 25 * s, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.setDefaults()
			h := &handler{c: c, opts: tc.opts}
			hdr := http.Header{"Date": {storedAt.Format(http.TimeFormat)}}
			if tc.cc != "" {
				hdr.Set("Cache-Control", tc.cc)
			}
			prev := Response{Status: 200, Header: hdr, StoredAt: storedAt.UnixNano()}
			if got := h.mayStandIn(prev, tc.unreachable, storedAt.Add(tc.after)); got != tc.want {
				t.Fatalf("mayStandIn = %v, want %v", got, tc.want)
			}
		})
	}
	// A targeted field forbids it too.
	o := Options{DeclaredFreshnessOnly: true}
	o.setDefaults()
	h := &handler{c: c, opts: o}
	prev := Response{Status: 200, StoredAt: storedAt.UnixNano(), Header: http.Header{
		"Date": {storedAt.Format(http.TimeFormat)}, "Cache-Control": {"max-age=60"}, "Cdn-Cache-Control": {"max-age=60, must-revalidate"}}}
	if h.mayStandIn(prev, true, storedAt.Add(90*s)) {
		t.Fatal("CDN-Cache-Control: must-revalidate let a stale response stand in")
	}
}
