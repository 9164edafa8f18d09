package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// RFC 9111 §4.4: a successful unsafe request invalidates the stored
// responses of its URL, and of its Location and Content-Location on the
// same host, on every replica; a failed one does not.
func TestUnsafeMethodsInvalidate(t *testing.T) {
	ns := redistest.Prefix(t)
	var version atomic.Int32
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("Vary", "Accept-Language")
			fmt.Fprintf(w, "%s v%d %s", r.URL.Path, version.Load(), r.Header.Get("Accept-Language"))
		case http.MethodPost:
			if r.Header.Get("X-Fail") != "" {
				http.Error(w, "rejected", http.StatusConflict)
				return
			}
			version.Add(1)
			w.Header().Set("Location", r.Header.Get("X-Loc"))
			w.Header().Set("Content-Location", r.Header.Get("X-Cloc"))
			w.WriteHeader(http.StatusCreated)
		default:
			version.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}
	}}
	var urls []string
	for range 2 {
		urls = append(urls, serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h).URL)
	}
	en, fr := map[string]string{"Accept-Language": "en"}, map[string]string{"Accept-Language": "fr"}
	fill := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			for _, lang := range []map[string]string{en, fr} {
				get(t, urls[0]+p, lang)
				if r := get(t, urls[1]+p, lang); r.header.Get("X-Cache") != "HIT" {
					t.Fatalf("%s %v not stored: %s", p, lang, r.header.Get("X-Cache"))
				}
			}
		}
	}
	expect := func(path, status string) {
		t.Helper()
		for _, lang := range []map[string]string{en, fr} {
			r := get(t, urls[0]+path, lang)
			if r.header.Get("X-Cache") != status {
				t.Errorf("%s %v after the write: %s %q, want %s", path, lang, r.header.Get("X-Cache"), r.body, status)
			}
		}
	}
	fill("/items/1")
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if r := do(t, m, urls[1]+"/items/1", nil); r.status != http.StatusNoContent || r.header.Get("X-Cache") != "BYPASS" {
			t.Fatalf("%s: %d %s", m, r.status, r.header.Get("X-Cache"))
		}
		expect("/items/1", "MISS")
		fill("/items/1")
	}
	// A POST names other URLs of this host; another host's are left alone.
	fill("/items", "/items/2", "/items/3", "/items/4")
	do(t, http.MethodPost, urls[1]+"/items", map[string]string{"X-Loc": "/items/2", "X-Cloc": "http://" + host + "/items/3"})
	expect("/items", "MISS")
	expect("/items/2", "MISS")
	expect("/items/3", "MISS")
	expect("/items/4", "HIT")
	fill("/items", "/items/2")
	do(t, http.MethodPost, urls[1]+"/items", map[string]string{"X-Loc": "http://elsewhere.example/items/2"})
	expect("/items/2", "HIT")
	// A failed write invalidates nothing.
	fill("/items")
	if r := do(t, http.MethodPost, urls[1]+"/items", map[string]string{"X-Fail": "1"}); r.status != http.StatusConflict {
		t.Fatalf("failed POST: %d", r.status)
	}
	expect("/items", "HIT")
}

// RFC 9111 §4.3: an entry refreshed with its validators is revalidated, not
// re-sent: the handler's 304 freshens the stored response (its headers
// updated per §3.2 and §4.3.4, its body kept).
func TestConditionalRefresh(t *testing.T) {
	var full, notModified atomic.Int32
	var sawINM, sawIMS atomic.Value
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		if inm := r.Header.Get("If-None-Match"); inm != "" {
			sawINM.Store(inm)
			sawIMS.Store(r.Header.Get("If-Modified-Since"))
			if inm == `"v1"` {
				notModified.Add(1)
				w.Header().Set("Cache-Control", "max-age=3600")
				w.Header().Set("X-Version", "revalidated")
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		full.Add(1)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Fri, 02 Jan 2026 03:04:05 GMT")
		w.Header().Set("X-Version", "first")
		fmt.Fprint(w, "the full body")
	}}
	// Fresh for 1ms, then stale for an hour: the next request is answered
	// stale and refreshes in the background.
	c := newResponses(t, redistest.Client(t), cache.Options{})
	srv := serve(t, c, middleware.Options{TTL: time.Millisecond, Stale: time.Hour}, h)
	get(t, srv.URL+"/doc", nil)
	for r := get(t, srv.URL+"/doc", nil); r.header.Get("X-Cache") != "STALE"; r = get(t, srv.URL+"/doc", nil) {
		if r.header.Get("X-Cache") != "HIT" {
			t.Fatalf("before the refresh: %s", r.header.Get("X-Cache"))
		}
	}
	waitFramesGone(t, backgroundFrame)
	if full.Load() != 1 || notModified.Load() != 1 || sawINM.Load() != `"v1"` || sawIMS.Load() != "Fri, 02 Jan 2026 03:04:05 GMT" {
		t.Fatalf("full %d, 304 %d, If-None-Match %v, If-Modified-Since %v", full.Load(), notModified.Load(), sawINM.Load(), sawIMS.Load())
	}
	r := get(t, srv.URL+"/doc", nil)
	if r.header.Get("X-Cache") != "HIT" || r.body != "the full body" || r.header.Get("X-Version") != "revalidated" ||
		r.header.Get("ETag") != `"v1"` || r.header.Get("Cache-Control") != "max-age=3600" {
		t.Fatalf("after the 304: %s %q %v", r.header.Get("X-Cache"), r.body, r.header)
	}
	// The middleware's own ETag is not sent to the handler as a validator.
	sawINM.Store("")
	h2 := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		sawINM.Store(r.Header.Get("If-None-Match"))
		fmt.Fprint(w, "no validator of its own")
	}}
	srv2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{TTL: time.Millisecond, Stale: time.Hour}, h2)
	get(t, srv2.URL+"/doc", nil)
	for get(t, srv2.URL+"/doc", nil).header.Get("X-Cache") != "STALE" {
	}
	waitFramesGone(t, backgroundFrame)
	if h2.runs.Load() != 2 || sawINM.Load() != "" {
		t.Fatalf("runs %d, If-None-Match %q", h2.runs.Load(), sawINM.Load())
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

// RFC 9110 §13, §14: each request's own conditional and Range headers are
// answered from the stored full response.
func TestConditionalRequestsAnsweredFromTheStore(t *testing.T) {
	const body = "0123456789abcdefghij"
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Fri, 02 Jan 2026 03:04:05 GMT")
		fmt.Fprint(w, body)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	get(t, srv.URL+"/r", nil)
	cases := []struct {
		hdr    map[string]string
		status int
		body   string
	}{
		{nil, 200, body},
		{map[string]string{"If-None-Match": `"v1"`}, 304, ""},
		{map[string]string{"If-None-Match": `"v0"`}, 200, body},
		{map[string]string{"If-Modified-Since": "Fri, 02 Jan 2026 03:04:05 GMT"}, 304, ""},
		{map[string]string{"If-Modified-Since": "Thu, 01 Jan 2026 00:00:00 GMT"}, 200, body},
		{map[string]string{"Range": "bytes=5-9"}, 206, "56789"},
		{map[string]string{"Range": "bytes=-3"}, 206, "hij"},
		{map[string]string{"Range": "bytes=5-9", "If-Range": `"v1"`}, 206, "56789"},
		{map[string]string{"Range": "bytes=5-9", "If-Range": `"v0"`}, 200, body},
		{map[string]string{"Range": "bytes=50-60"}, 416, ""},
		{map[string]string{"If-Match": `"v0"`}, 412, ""},
		{map[string]string{"If-Match": `"v1"`}, 200, body},
	}
	for _, tc := range cases {
		r := get(t, srv.URL+"/r", tc.hdr)
		if r.status != tc.status || (tc.body != "" && r.body != tc.body) || (tc.status == 304 && r.body != "") {
			t.Errorf("%v: %d %q, want %d %q", tc.hdr, r.status, r.body, tc.status, tc.body)
		}
		if r.header.Get("X-Cache") != "HIT" {
			t.Errorf("%v: %s", tc.hdr, r.header.Get("X-Cache"))
		}
	}
	if h.runs.Load() != 1 {
		t.Errorf("%d handler runs", h.runs.Load())
	}
}

// A response that the cache cannot hold is served to its own request and
// logged, not dropped silently.
func TestNotStoredIsLogged(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs}, nil))
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprint(w, strings.Repeat("z", 8000))
	}}
	c := newResponses(t, redistest.Client(t), cache.Options{MaxValueBytes: 4096})
	srv := serve(t, c, middleware.Options{Logger: logger}, h)
	for range 2 {
		if r := get(t, srv.URL+"/big", nil); r.header.Get("X-Cache") != "MISS" || len(r.body) != 8000 {
			t.Fatalf("%s %d", r.header.Get("X-Cache"), len(r.body))
		}
	}
	if got := strings.Count(logs.String(), "response not stored"); got != 2 || !strings.Contains(logs.String(), "value too large") {
		t.Fatalf("logs: %s", logs.String())
	}
}

// lockedWriter serialises writes (the logger may be called from several
// requests at once).
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
