package middleware_test

// Requests that carry cookies: by default they pass by the cache, so that
// no session's page is stored for everyone; the cookies a route ignores
// are hidden from its handler and the request is cached; the cookies it
// varies on key their own entries, which an unsafe request retires all
// together.

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// sessionPage answers with the page of the request's session cookie.
func sessionPage(w http.ResponseWriter, r *http.Request, n int32) {
	who := "anonymous"
	if c, err := r.Cookie("session"); err == nil {
		who = c.Value
	}
	fmt.Fprintf(w, "account page of %s (cookies %q)", who, r.Header.Get("Cookie"))
}

func TestRequestWithASessionCookiePassesByTheCache(t *testing.T) {
	h := &counting{write: sessionPage}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	steps := []struct{ cookie, body, status string }{
		{"session=alice", `account page of alice (cookies "session=alice")`, "BYPASS"},
		{"", `account page of anonymous (cookies "")`, "MISS"},
		{"session=bob", `account page of bob (cookies "session=bob")`, "BYPASS"},
		{"", `account page of anonymous (cookies "")`, "HIT"},
		{"session=alice", `account page of alice (cookies "session=alice")`, "BYPASS"},
	}
	for i, s := range steps {
		hdr := map[string]string{}
		if s.cookie != "" {
			hdr["Cookie"] = s.cookie
		}
		r := get(t, srv.URL+"/account", hdr)
		if r.body != s.body || r.header.Get("X-Cache") != s.status {
			t.Errorf("step %d (cookie %q): %s %q, want %s %q", i, s.cookie, r.header.Get("X-Cache"), r.body, s.status, s.body)
		}
	}
}

func TestIgnoredCookiesAreHiddenFromTheHandler(t *testing.T) {
	h := &counting{write: sessionPage}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}),
		middleware.Options{IgnoreCookies: []string{"_ga*", "consent"}}, h)
	const page = `account page of anonymous (cookies "")`
	for i, s := range []struct{ cookie, status string }{
		{"_ga=GA1.2.3; consent=yes", "MISS"},
		{"_ga_XYZ=1", "HIT"},
		{"", "HIT"},
	} {
		r := get(t, srv.URL+"/home", map[string]string{"Cookie": s.cookie})
		if r.body != page || r.header.Get("X-Cache") != s.status {
			t.Errorf("step %d (cookie %q): %s %q, want %s %q", i, s.cookie, r.header.Get("X-Cache"), r.body, s.status, page)
		}
	}
	// A cookie the route does not name, among ignored ones: the request
	// is one client's.
	r := get(t, srv.URL+"/home", map[string]string{"Cookie": "_ga=1; session=alice"})
	if r.header.Get("X-Cache") != "BYPASS" || r.body != `account page of alice (cookies "_ga=1; session=alice")` {
		t.Errorf("session among ignored cookies: %s %q", r.header.Get("X-Cache"), r.body)
	}
}

func TestVaryCookiesKeyTheirValues(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		fmt.Fprintf(w, "page for cookies %q", r.Header.Get("Cookie"))
	}}
	// Two replicas: the variants are learned through Redis.
	ns := redistest.Prefix(t)
	opts := middleware.Options{VaryCookies: []string{"lang", "currency"}, IgnoreCookies: []string{"_ga"}}
	s1 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), opts, h)
	s2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), opts, h)
	steps := []struct {
		srv             string
		cookie          string
		status, cookie2 string // the answer, and the Cookie header the handler saw
	}{
		{s1.URL, "lang=fr; _ga=1", "MISS", "lang=fr"},
		{s2.URL, "currency=eur; lang=fr", "MISS", "currency=eur; lang=fr"},
		{s2.URL, "_ga=2; lang=fr", "HIT", "lang=fr"},
		{s1.URL, "lang=en", "MISS", "lang=en"},
		{s1.URL, "lang=fr; currency=eur", "HIT", "currency=eur; lang=fr"},
		{s2.URL, "", "MISS", ""},
		{s1.URL, "lang=en", "HIT", "lang=en"},
	}
	for i, s := range steps {
		r := get(t, s.srv+"/catalogue", map[string]string{"Cookie": s.cookie})
		want := fmt.Sprintf("page for cookies %q", s.cookie2)
		if r.body != want || r.header.Get("X-Cache") != s.status {
			t.Errorf("step %d (cookie %q): %s %q, want %s %q", i, s.cookie, r.header.Get("X-Cache"), r.body, s.status, want)
		}
	}
	// An unsafe request (anonymous, from either replica) retires every
	// cookie variant of the URL (RFC 9111 §4.4).
	if r := do(t, http.MethodPost, s2.URL+"/catalogue", nil); r.status != http.StatusOK {
		t.Fatalf("POST: %d", r.status)
	}
	for _, cookie := range []string{"lang=fr", "lang=en", "lang=fr; currency=eur"} {
		if r := get(t, s1.URL+"/catalogue", map[string]string{"Cookie": cookie}); r.header.Get("X-Cache") != "MISS" {
			t.Errorf("after the POST, cookie %q: %s %q, want a MISS", cookie, r.header.Get("X-Cache"), r.body)
		}
	}
}

// Naming Cookie in VaryHeaders keys the whole header: every request is
// cached, each distinct Cookie header under its own entry.
func TestCookieInVaryHeadersKeysTheWholeHeader(t *testing.T) {
	h := &counting{write: sessionPage}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{VaryHeaders: []string{"Cookie"}}, h)
	for i, s := range []struct{ cookie, status, who string }{
		{"session=alice", "MISS", "alice"},
		{"session=bob", "MISS", "bob"},
		{"session=alice", "HIT", "alice"},
		{"", "MISS", "anonymous"},
	} {
		r := get(t, srv.URL+"/account", map[string]string{"Cookie": s.cookie})
		want := fmt.Sprintf("account page of %s (cookies %q)", s.who, s.cookie)
		if r.body != want || r.header.Get("X-Cache") != s.status {
			t.Errorf("step %d: %s %q, want %s %q", i, r.header.Get("X-Cache"), r.body, s.status, want)
		}
	}
}
