package middleware_test

// Freshness as RFC 9111 reckons it, end to end: how long Redis keeps a
// stored response (its fresh window plus its stale windows) as its
// Cache-Control, Age, Date and Expires say; the directives that forbid
// serving it stale; and DeclaredFreshnessOnly.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// keptFor is how long Redis keeps the stored response of path: its fresh
// window plus its stale windows.
func keptFor(t *testing.T, rdb redis.UniversalClient, c *cache.Cache[middleware.Response], url string) time.Duration {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = host
	return rdb.PTTL(context.Background(), "{"+c.Namespace()+":"+middleware.Key(req, nil)+"}:v").Val()
}

// headerHandler answers with the response headers named in its request's
// query (?h=Name:value&h=...), which lets one server play every case.
var headerHandler = &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
	for _, kv := range r.URL.Query()["h"] {
		name, value, _ := strings.Cut(kv, ":")
		w.Header().Add(name, strings.TrimSpace(value))
	}
	fmt.Fprintf(w, "run %d", n)
}}

func withHeaders(base string, kv ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for i, h := range kv {
		if i == 0 {
			b.WriteString("?h=")
		} else {
			b.WriteString("&h=")
		}
		b.WriteString(strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "%20", "#", "%23").Replace(h))
	}
	return b.String()
}

// RFC 9111 §4.2.3: the current age includes the Age the response arrived
// with, and now minus its Date; the freshness left is the lifetime less it.
func TestAgeCountsTowardsFreshness(t *testing.T) {
	rdb := redistest.Client(t)
	c := newResponses(t, rdb, cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, headerHandler)
	past := time.Now().Add(-20 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name     string
		headers  []string
		min, max time.Duration
		age      int
	}{
		{"Age", []string{"Cache-Control: max-age=60", "Age: 30"}, 28 * time.Second, 30 * time.Second, 30},
		{"Date", []string{"Cache-Control: max-age=60", "Date: " + past}, 37 * time.Second, 40 * time.Second, 20},
		{"Age over Date", []string{"Cache-Control: max-age=60", "Date: " + past, "Age: 50"}, 8 * time.Second, 10 * time.Second, 50},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := withHeaders(fmt.Sprintf("%s/age%d", srv.URL, i), tc.headers...)
			get(t, url, nil)
			if kept := keptFor(t, rdb, c, url); kept < tc.min || kept > tc.max {
				t.Errorf("kept %s, want [%s, %s]", kept, tc.min, tc.max)
			}
			r := get(t, url, nil)
			var age int
			fmt.Sscan(r.header.Get("Age"), &age)
			if r.header.Get("X-Cache") != "HIT" || age < tc.age || age > tc.age+2 {
				t.Errorf("%s with Age %q, want about %d", r.header.Get("X-Cache"), r.header.Get("Age"), tc.age)
			}
		})
	}
	// Older than its lifetime on arrival: stale, not stored.
	url := withHeaders(srv.URL+"/old", "Cache-Control: max-age=60", "Age: 60")
	get(t, url, nil)
	if r := get(t, url, nil); r.header.Get("X-Cache") != "MISS" {
		t.Errorf("a response stale on arrival was stored: %s", r.header.Get("X-Cache"))
	}
}

// RFC 9111 §4.2.1 and §5.3: without max-age or s-maxage, Expires minus Date
// is the lifetime; an invalid Expires, "0" above all, or two of them, mean
// already expired; max-age wins over Expires.
func TestExpires(t *testing.T) {
	rdb := redistest.Client(t)
	c := newResponses(t, rdb, cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, headerHandler)
	now := time.Now().UTC()
	date := "Date: " + now.Format(http.TimeFormat)
	in := func(d time.Duration) string { return "Expires: " + now.Add(d).Format(http.TimeFormat) }
	cases := []struct {
		name     string
		headers  []string
		min, max time.Duration // 0, 0: not stored
	}{
		{"future", []string{date, in(40 * time.Second)}, 38 * time.Second, 40 * time.Second},
		{"no Date", []string{in(40 * time.Second)}, 37 * time.Second, 40 * time.Second},
		{"zero", []string{date, "Expires: 0"}, 0, 0},
		{"invalid", []string{date, "Expires: next tuesday"}, 0, 0},
		{"past", []string{date, in(-time.Minute)}, 0, 0},
		{"twice", []string{date, in(time.Minute), in(2 * time.Minute)}, 0, 0},
		{"max-age wins", []string{date, in(-time.Minute), "Cache-Control: max-age=100"}, 98 * time.Second, 100 * time.Second},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := withHeaders(fmt.Sprintf("%s/exp%d", srv.URL, i), tc.headers...)
			get(t, url, nil)
			second := get(t, url, nil)
			if tc.max == 0 {
				if second.header.Get("X-Cache") != "MISS" {
					t.Errorf("stored: %s", second.header.Get("X-Cache"))
				}
				return
			}
			if kept := keptFor(t, rdb, c, url); second.header.Get("X-Cache") != "HIT" || kept < tc.min || kept > tc.max {
				t.Errorf("%s, kept %s, want [%s, %s]", second.header.Get("X-Cache"), kept, tc.min, tc.max)
			}
		})
	}
}

// RFC 9111 §5.2.2.2, §5.2.2.8, §5.2.2.10, §4.2.4: must-revalidate and
// proxy-revalidate responses are never served stale, s-maxage ones only
// within their own stale-while-revalidate; the route's windows apply to
// the others.
func TestRevalidationDirectivesForbidStale(t *testing.T) {
	rdb := redistest.Client(t)
	c := newResponses(t, rdb, cache.Options{})
	srv := serve(t, c, middleware.Options{Stale: time.Hour, StaleIfError: 2 * time.Hour}, headerHandler)
	checkKeptFor(t, rdb, c, srv.URL+"/rv", []keptCase{
		{"max-age=5, must-revalidate", 4 * time.Second, 5 * time.Second},
		{"max-age=5, proxy-revalidate", 4 * time.Second, 5 * time.Second},
		{"max-age=5, must-revalidate, stale-while-revalidate=60", 4 * time.Second, 5 * time.Second},
		{"s-maxage=5", 4 * time.Second, 5 * time.Second},
		{"s-maxage=5, stale-while-revalidate=10", 14 * time.Second, 15 * time.Second},
		{"max-age=5", 2*time.Hour + 4*time.Second, 2*time.Hour + 5*time.Second},
	})
}

// keptCase is a Cache-Control and how long Redis must keep its response.
type keptCase struct {
	cc       string
	min, max time.Duration
}

// checkKeptFor stores one response per case under base and checks how
// long Redis keeps it: its fresh window plus its stale windows.
func checkKeptFor(t *testing.T, rdb redis.UniversalClient, c *cache.Cache[middleware.Response], base string, cases []keptCase) {
	t.Helper()
	for i, tc := range cases {
		url := withHeaders(fmt.Sprint(base, i), "Cache-Control: "+tc.cc)
		get(t, url, nil)
		if kept := keptFor(t, rdb, c, url); kept < tc.min || kept > tc.max {
			t.Errorf("%q: kept %s, want [%s, %s]", tc.cc, kept, tc.min, tc.max)
		}
	}
}

// DeclaredFreshnessOnly: only responses that declare their freshness are
// stored, untouched (no ETag added), and served stale only as they allow.
func TestDeclaredFreshnessOnly(t *testing.T) {
	rdb := redistest.Client(t)
	c := newResponses(t, rdb, cache.Options{})
	srv := serve(t, c, middleware.Options{DeclaredFreshnessOnly: true, Stale: time.Hour, TTL: time.Hour}, headerHandler)
	exp := "Expires: " + time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)
	cases := []struct {
		headers  []string
		min, max time.Duration // 0, 0: not stored
	}{
		{nil, 0, 0},
		{[]string{"Cache-Control: public"}, 0, 0},
		{[]string{"Last-Modified: Fri, 02 Jan 2026 03:04:05 GMT"}, 0, 0},
		// Kept past its lifetime (and windows) for the keep window, at least
		// a minute, to be revalidated.
		{[]string{"Cache-Control: max-age=30"}, 88 * time.Second, 90 * time.Second},
		{[]string{"Cache-Control: s-maxage=30, max-age=1"}, 88 * time.Second, 90 * time.Second},
		{[]string{exp}, 117 * time.Second, 120 * time.Second},
		{[]string{"Cache-Control: max-age=30, stale-while-revalidate=30"}, 88 * time.Second, 90 * time.Second},
	}
	for i, tc := range cases {
		url := withHeaders(fmt.Sprintf("%s/d%d", srv.URL, i), tc.headers...)
		first := get(t, url, nil)
		second := get(t, url, nil)
		if first.header.Get("ETag") != "" {
			t.Errorf("%v: an ETag was added", tc.headers)
		}
		if tc.max == 0 {
			if second.header.Get("X-Cache") != "MISS" {
				t.Errorf("%v stored: %s", tc.headers, second.header.Get("X-Cache"))
			}
			continue
		}
		if kept := keptFor(t, rdb, c, url); second.header.Get("X-Cache") != "HIT" || kept < tc.min || kept > tc.max {
			t.Errorf("%v: %s, kept %s, want [%s, %s]", tc.headers, second.header.Get("X-Cache"), kept, tc.min, tc.max)
		}
	}
}

func TestCacheControlSetsTTLAndStaleWindows(t *testing.T) {
	rdb := redistest.Client(t)
	c := newResponses(t, rdb, cache.Options{TTL: time.Hour})
	srv := serve(t, c, middleware.Options{}, headerHandler)
	checkKeptFor(t, rdb, c, srv.URL+"/cc", []keptCase{
		{"max-age=5", 4 * time.Second, 5 * time.Second},
		{"max-age=5, s-maxage=20", 19 * time.Second, 20 * time.Second},
		{"max-age=5, stale-while-revalidate=10", 14 * time.Second, 15 * time.Second},
		{"max-age=5, stale-if-error=100", 104 * time.Second, 105 * time.Second},
		{"public", 59 * time.Minute, time.Hour},
	})
	// max-age=0 is not stored.
	url := withHeaders(srv.URL+"/cc0", "Cache-Control: max-age=0")
	get(t, url, nil)
	if r := get(t, url, nil); r.header.Get("X-Cache") != "MISS" {
		t.Fatalf("max-age=0 stored: %s", r.header.Get("X-Cache"))
	}
}
