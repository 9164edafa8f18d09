package middleware

import (
	"net/http"
	"testing"
	"time"
)

// The storage rules, case by case, on a fixed clock.
func TestStorageRules(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	at := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	const s = time.Second
	type want struct {
		stored, shareable bool
		fresh, stale, sie time.Duration
	}
	cases := []struct {
		name   string
		status int
		header http.Header
		opts   Options
		want   want
	}{
		{"heuristic: the cache's TTL and windows", 200, http.Header{}, Options{}, want{true, false, -1, -1, -1}},
		{"heuristic: the route's TTL and windows", 200, http.Header{}, Options{TTL: time.Minute, Stale: 10 * s, StaleIfError: 20 * s}, want{true, false, time.Minute, 10 * s, 20 * s}},
		{"§4.2.3 Age counts", 200, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"30"}}, Options{}, want{true, false, 30 * s, -1, -1}},
		{"§4.2.3 Date counts", 200, http.Header{"Cache-Control": {"max-age=60"}, "Date": {at(-45 * s)}}, Options{}, want{true, false, 15 * s, -1, -1}},
		{"§4.2.3 the larger of Age and Date", 200, http.Header{"Cache-Control": {"max-age=60"}, "Date": {at(-10 * s)}, "Age": {"40"}}, Options{}, want{true, false, 20 * s, -1, -1}},
		{"§4.2.1 s-maxage over max-age", 200, http.Header{"Cache-Control": {"max-age=10, s-maxage=100"}}, Options{Stale: time.Hour}, want{true, false, 100 * s, 0, 0}},
		{"§4.2.1 Expires minus Date", 200, http.Header{"Date": {date}, "Expires": {at(90 * s)}}, Options{}, want{true, false, 90 * s, -1, -1}},
		{"§4.2.1 max-age over Expires", 200, http.Header{"Date": {date}, "Expires": {at(90 * s)}, "Cache-Control": {"max-age=5"}}, Options{}, want{true, false, 5 * s, -1, -1}},
		{"§5.3 invalid Expires is in the past", 200, http.Header{"Expires": {"0"}}, Options{}, want{false, true, 0, 0, 0}},
		{"§5.3 past Expires", 200, http.Header{"Date": {date}, "Expires": {at(-s)}}, Options{}, want{false, true, 0, 0, 0}},
		{"§5.2.2.2 must-revalidate: no stale", 200, http.Header{"Cache-Control": {"max-age=5, must-revalidate, stale-if-error=60"}}, Options{Stale: time.Hour}, want{true, false, 5 * s, 0, 0}},
		{"§5.2.2.8 proxy-revalidate: no stale", 200, http.Header{"Cache-Control": {"max-age=5, proxy-revalidate"}}, Options{Stale: time.Hour}, want{true, false, 5 * s, 0, 0}},
		{"§5.2.2.10 s-maxage: only its own windows", 200, http.Header{"Cache-Control": {"s-maxage=5, stale-while-revalidate=7"}}, Options{Stale: time.Hour}, want{true, false, 5 * s, 7 * s, 0}},
		{"RFC 5861 windows", 200, http.Header{"Cache-Control": {"max-age=5, stale-while-revalidate=7, stale-if-error=9"}}, Options{Stale: time.Hour}, want{true, false, 5 * s, 7 * s, 9 * s}},
		{"§5.2.2.5 no-store", 200, http.Header{"Cache-Control": {"no-store"}}, Options{}, want{}},
		{"§5.2.2.7 private", 200, http.Header{"Cache-Control": {"private, max-age=60"}}, Options{}, want{}},
		{"§5.2.2.4 no-cache", 200, http.Header{"Cache-Control": {"no-cache"}}, Options{}, want{}},
		{"Set-Cookie", 200, http.Header{"Set-Cookie": {"a=b"}, "Cache-Control": {"public, max-age=60"}}, Options{}, want{}},
		{"§4.1 Vary: *", 200, http.Header{"Vary": {"*"}}, Options{}, want{}},
		{"304 to a plain GET", 304, http.Header{}, Options{}, want{}},
		{"206 to a plain GET", 206, http.Header{}, Options{}, want{}},
		{"§4.2.2 heuristic: not a heuristically cacheable status", 302, http.Header{}, Options{}, want{false, true, 0, 0, 0}},
		{"§4.2.2 heuristic: 204", 204, http.Header{}, Options{}, want{true, false, -1, -1, -1}},
		{"§3 any status with a declared lifetime", 302, http.Header{"Cache-Control": {"max-age=5"}}, Options{}, want{true, false, 5 * s, -1, -1}},
		{"§3 a 5xx with a declared lifetime", 503, http.Header{"Cache-Control": {"max-age=5"}}, Options{}, want{true, false, 5 * s, -1, -1}},
		{"a 5xx without one is a failure", 503, http.Header{}, Options{}, want{false, true, 0, 0, 0}},
		{"status not configured", 404, http.Header{"Cache-Control": {"max-age=5"}}, Options{Statuses: []int{200}}, want{false, true, 0, 0, 0}},
		{"RFC 9213 CDN-Cache-Control over Cache-Control", 200, http.Header{"Cache-Control": {"no-store"}, "Cdn-Cache-Control": {"max-age=10"}}, Options{}, want{true, false, 10 * s, -1, -1}},
		{"RFC 9213 CDN-Cache-Control: private", 200, http.Header{"Cache-Control": {"max-age=60"}, "Cdn-Cache-Control": {"private"}}, Options{}, want{}},
		{"RFC 9213 an invalid CDN-Cache-Control is ignored", 200, http.Header{"Cache-Control": {"no-store"}, "Cdn-Cache-Control": {"max-age=10, &&&"}}, Options{}, want{}},
		{"RFC 9213 another targeted field", 200, http.Header{"Cache-Control": {"max-age=60"}, "Cdn-Cache-Control": {"no-store"}, "Edge-Cache-Control": {"max-age=7"}}, Options{TargetedHeader: "Edge-Cache-Control"}, want{true, false, 7 * s, -1, -1}},
		{"RFC 9213 no targeted field", 200, http.Header{"Cache-Control": {"max-age=60"}, "Cdn-Cache-Control": {"no-store"}}, Options{TargetedHeader: "-"}, want{true, false, 60 * s, -1, -1}},
		{"max-age=0", 200, http.Header{"Cache-Control": {"max-age=0"}}, Options{}, want{false, true, 0, 0, 0}},
		{"stale on arrival", 200, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"61"}}, Options{}, want{false, true, 0, 0, 0}},
		{"declared only: any final status", 302, http.Header{"Cache-Control": {"max-age=5"}}, Options{DeclaredFreshnessOnly: true}, want{true, false, 5 * s, 0, 0}},
		{"declared only: configured statuses", 302, http.Header{"Cache-Control": {"max-age=5"}}, Options{DeclaredFreshnessOnly: true, Statuses: []int{200}}, want{false, true, 0, 0, 0}},
		{"declared only: none declared", 200, http.Header{"Cache-Control": {"public"}}, Options{DeclaredFreshnessOnly: true}, want{false, true, 0, 0, 0}},
		{"declared only: no route windows", 200, http.Header{"Cache-Control": {"max-age=5"}}, Options{DeclaredFreshnessOnly: true, Stale: time.Hour}, want{true, false, 5 * s, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.setDefaults()
			v := tc.opts.storage(Response{Status: tc.status, Header: tc.header}, now)
			got := want{stored: v.reason == "", shareable: v.shareable}
			if got.stored {
				got.fresh, got.stale, got.sie = v.fresh, v.staleFor, v.staleIfError
			}
			if got != tc.want {
				t.Fatalf("got %+v (%q), want %+v", got, v.reason, tc.want)
			}
			if wantFailure := !got.stored && tc.status >= 500; v.failure != wantFailure {
				t.Fatalf("failure %v, want %v", v.failure, wantFailure)
			}
		})
	}
}

// RFC 9111 §3.2, §4.3.4: a 304 updates the stored header fields, except
// Content-Length; the status and body stay.
func TestFreshen(t *testing.T) {
	stored := Response{Status: 200, Body: []byte("body"), Header: http.Header{
		"Content-Length": {"4"}, "Etag": {`"v1"`}, "Cache-Control": {"max-age=1"}, "X-Old": {"kept"}, "Date": {"old"}, "Age": {"50"},
	}}
	got := freshen(stored, Response{Status: 304, Header: http.Header{
		"Content-Length": {"0"}, "Cache-Control": {"max-age=60"}, "X-New": {"added"}, "Connection": {"close"},
	}})
	if got.Status != 200 || string(got.Body) != "body" || got.Header.Get("Content-Length") != "4" ||
		got.Header.Get("Cache-Control") != "max-age=60" || got.Header.Get("X-Old") != "kept" || got.Header.Get("X-New") != "added" ||
		got.Header.Get("Connection") != "" || got.Header.Get("Date") != "" || got.Header.Get("Age") != "" {
		t.Fatalf("%+v", got)
	}
	if stored.Header.Get("Cache-Control") != "max-age=1" {
		t.Fatal("the stored response was modified")
	}
}

// FuzzCacheControl: parsing any Cache-Control never panics, and lifetimes
// are absent (-1) or within [0, 2^31 s].
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"max-age=60", `s-maxage="120", private`, "max-age=-1, max-age=5", "stale-while-revalidate=99999999999999999999", "no-store,,=,", "max-age"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cc string) {
		d := parseCacheControl(http.Header{"Cache-Control": {cc}})
		for _, v := range []time.Duration{d.maxAge, d.sMaxAge, d.staleWhileRevalidate, d.staleIfError} {
			if v != -1 && (v < 0 || v > maxDeltaSeconds*time.Second) {
				t.Fatalf("%q: %v", cc, v)
			}
		}
		var o Options
		o.setDefaults()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		v := o.storage(Response{Status: 200, Header: http.Header{"Cache-Control": {cc}, "Expires": {cc}, "Age": {cc}, "Date": {cc}}}, now)
		if v.reason == "" && v.fresh != -1 && v.fresh < time.Millisecond {
			t.Fatalf("%q: stored with %v fresh", cc, v.fresh)
		}
	})
}
