package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// do sends a request and returns its status, X-Cache and body, failing the
// test when a tag header reached the client.
func do(t *testing.T, req *http.Request) (status int, xcache, body string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"Surrogate-Key", "Cache-Tag"} {
		if v := res.Header.Get(h); v != "" {
			t.Errorf("%s %s: the response carries %s: %q; the middleware removes it", req.Method, req.URL, h, v)
		}
	}
	return res.StatusCode, res.Header.Get("X-Cache"), string(b)
}

func request(t *testing.T, method, url string, body io.Reader, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// TestTagsPurgeAsThePageSays runs the page's program against a real
// redis-server and holds what docs/http.md says of tagging and purging:
// the tag headers never reach the client; a purge of any of a response's
// keys — from Surrogate-Key, from Cache-Tag, or given by middleware.Tag —
// makes its URL's next request run the handler, and leaves responses
// without that key cached; the purge endpoint takes PURGE with the keys in
// Surrogate-Key, behind the application's authorisation; and
// middleware.Purge after a write makes the next request see the write.
func TestTagsPurgeAsThePageSays(t *testing.T) {
	_, addrs := exampletest.Start(t, 1, func(a []string) []string {
		return []string{"-redis", redistest.Addr(t), "-listen", a[0], "-admin-token", "secret"}
	})
	addr := addrs[0]
	base := "http://" + addr
	get := func(id string) (string, string) {
		t.Helper()
		status, xc, body := do(t, request(t, "GET", base+"/reports/"+id, nil))
		if status != http.StatusOK {
			t.Fatalf("GET /reports/%s: %d %s", id, status, body)
		}
		return xc, body
	}
	expect := func(id, xcache, body string) {
		t.Helper()
		if xc, b := get(id); xc != xcache || b != body {
			t.Errorf("GET /reports/%s: X-Cache %q, %q; want %s, %q", id, xc, b, xcache, body)
		}
	}
	purge := func(key string) {
		t.Helper()
		status, _, body := do(t, request(t, "PURGE", base+"/purge", nil, "Surrogate-Key", key, "Authorization", "Bearer secret"))
		if status != http.StatusOK || !strings.Contains(body, `"purged"`) {
			t.Fatalf("PURGE %s: %d %s", key, status, body)
		}
	}

	expect("42", "MISS", "report 42 total 0\n")
	expect("42", "HIT", "report 42 total 0\n")
	expect("43", "MISS", "report 43 total 0\n")

	if status, _, _ := do(t, request(t, "PURGE", base+"/purge", nil, "Surrogate-Key", "report-42")); status != http.StatusForbidden {
		t.Errorf("PURGE without the token: %d, want 403 from the application's authorisation", status)
	}
	expect("42", "HIT", "report 42 total 0\n")

	for _, key := range []string{"report-42", "team-3", "customer-42"} { // Surrogate-Key, Cache-Tag, Tag
		purge(key)
		expect("42", "MISS", "report 42 total 0\n")
		expect("42", "HIT", "report 42 total 0\n")
	}
	// report-42 and customer-42 are 42's alone; team-3 purged 43 too.
	expect("43", "MISS", "report 43 total 0\n")
	purge("report-42")
	expect("43", "HIT", "report 43 total 0\n")

	form := url.Values{"total": {"99"}}.Encode()
	if status, _, body := do(t, request(t, "PUT", base+"/reports/42/total", strings.NewReader(form), "Content-Type", "application/x-www-form-urlencoded")); status != http.StatusOK {
		t.Fatalf("PUT /reports/42/total: %d %s", status, body)
	}
	expect("42", "MISS", "report 42 total 99\n")
}
