package middleware_test

// What a handler reads is what the key holds, so that no request poisons
// the entry others are answered from ("Practical Web Cache Poisoning",
// Kettle): the forwarding headers frameworks build links from, the path
// as the router sees it (raw and decoded), the query as sent; and what a
// response says about one connection (the fields its Connection names) is
// never stored.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

// linkPage builds its script link from the host the client asked for, as
// frameworks behind proxies do.
func linkPage(w http.ResponseWriter, r *http.Request, n int32) {
	host := r.Host
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" {
		host = fh
	}
	if fwd := r.Header.Get("Forwarded"); fwd != "" {
		for _, p := range strings.Split(fwd, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "host="); ok {
				host = v
			}
		}
	}
	fmt.Fprintf(w, `<script src="https://%s/app.js"></script> run %d`, host, n)
}

func TestForwardingHeadersCannotPoisonTheEntry(t *testing.T) {
	h := &counting{write: linkPage}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for _, attack := range []map[string]string{
		{"X-Forwarded-Host": "evil.example"},
		{"Forwarded": "for=192.0.2.1;host=evil.example"},
		{"X-Forwarded-Host": "evil.example", "Forwarded": "host=evil.example;proto=http"},
	} {
		get(t, srv.URL+"/home", attack)
		get(t, srv.URL+"/home", attack)
	}
	for range 2 {
		if r := get(t, srv.URL+"/home", nil); strings.Contains(r.body, "evil") {
			t.Fatalf("a later client got the attacker's page: %s %q", r.header.Get("X-Cache"), r.body)
		}
	}
	// Behind a proxy, every client's request carries the same host and
	// proto but its own address: they share one entry.
	a := get(t, srv.URL+"/p", map[string]string{"Forwarded": "for=192.0.2.1;host=www.example;proto=https"})
	b := get(t, srv.URL+"/p", map[string]string{"Forwarded": "for=198.51.100.7;host=www.example;proto=https"})
	if b.header.Get("X-Cache") != "HIT" || a.body != b.body {
		t.Fatalf("clients behind one proxy do not share the entry: %s %q, %s %q", a.header.Get("X-Cache"), a.body, b.header.Get("X-Cache"), b.body)
	}
}

// chi routes on the raw path when it is not the default encoding of the
// decoded one, and a handler may read either: the key holds both, so a
// request whose raw path makes the handler see another slug, or another
// form of the URL, gets an entry of its own.
func TestKeyHoldsThePathTheRouterSees(t *testing.T) {
	c := newResponses(t, redistest.Client(t), cache.Options{})
	router := chi.NewRouter()
	router.With(middleware.Cache(c)).Get("/wiki/{slug}", func(w http.ResponseWriter, r *http.Request) {
		if slug := chi.URLParam(r, "slug"); slug != "café" || r.URL.RawPath != "" {
			// Not the canonical form of the URL: this site answers 404.
			http.Error(w, fmt.Sprintf("no page %q", slug), http.StatusNotFound)
			return
		}
		fmt.Fprint(w, "the café page")
	})
	srv := httptest.NewServer(router)
	t.Cleanup(srv.Close)
	for _, attack := range []string{"/wiki/%63af%C3%A9", "/wiki/caf%c3%a9", "/wiki/café"} {
		rawGet(t, srv.URL, attack)
	}
	for range 2 {
		if r := get(t, srv.URL+"/wiki/caf%C3%A9", nil); r.status != http.StatusOK || r.body != "the café page" {
			t.Fatalf("the browser's request got %d %s %q", r.status, r.header.Get("X-Cache"), r.body)
		}
	}
}

// The fields a response's Connection names are that connection's (RFC 9110
// §7.6.1): never stored, never replayed.
func TestFieldsConnectionNamesAreNotStored(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Connection", "X-Backend-Session, keep-alive")
		w.Header().Set("X-Backend-Session", fmt.Sprint("backend-secret-", n))
		w.Header().Set("X-Kept", "yes")
		fmt.Fprint(w, "page")
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	get(t, srv.URL+"/page", nil)
	r := get(t, srv.URL+"/page", nil)
	if r.header.Get("X-Cache") != "HIT" || r.header.Get("X-Kept") != "yes" {
		t.Fatalf("%s, X-Kept %q: want a HIT with the end-to-end fields", r.header.Get("X-Cache"), r.header.Get("X-Kept"))
	}
	if v := r.header.Get("X-Backend-Session"); v != "" {
		t.Fatalf("the stored response replayed X-Backend-Session %q", v)
	}
}

// An invalid targeted field (RFC 9213) does not override Cache-Control:
// max-age as a string is no directive, and the field left with none is as
// if absent, so no-store holds.
func TestInvalidTargetedFieldDoesNotOverrideNoStore(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("CDN-Cache-Control", `max-age="10000"`)
		fmt.Fprintf(w, "private page %d", n)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{TTL: time.Hour}), middleware.Options{}, h)
	get(t, srv.URL+"/p", nil)
	if r := get(t, srv.URL+"/p", nil); r.body != "private page 2" {
		t.Fatalf("a no-store response was stored: %s %q", r.header.Get("X-Cache"), r.body)
	}
}

// The host as sent: net/http's ServeMux matches host patterns as sent, so
// a request whose host differs only in case may reach another route, and
// must not share the real host's entry.
func TestKeyHoldsTheHostAsSent(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+host+"/page", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "the real page")
	})
	mux.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "fallback site for host %s", r.Host)
	})
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, mux)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/page", nil)
	req.Host = strings.ToUpper(host)
	sendRequest(t, req, nil)
	if r := get(t, srv.URL+"/page", nil); r.body != "the real page" {
		t.Fatalf("the real host's request got %s %q", r.header.Get("X-Cache"), r.body)
	}
}

// The scheme: one handler behind a plain and a TLS listener builds links
// with the scheme it was reached over, and an https client must not get
// the plain request's http:// links.
func TestKeyHoldsTheScheme(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		fmt.Fprintf(w, `<script src="%s://%s/app.js"></script>`, scheme, r.Host)
	})
	mw := middleware.CacheWithOptions(newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{})(h)
	plain := httptest.NewServer(mw)
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(mw)
	t.Cleanup(secure.Close)
	get(t, plain.URL+"/page", nil)
	req, _ := http.NewRequest(http.MethodGet, secure.URL+"/page", nil)
	req.Host = host
	res, err := secure.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if r := readReply(t, res); strings.Contains(r.body, "http://") {
		t.Fatalf("an https client got the plain request's page: %s %q", r.header.Get("X-Cache"), r.body)
	}
}

// The scheme headers frameworks read besides X-Forwarded-Proto (Echo's
// Context.Scheme reads X-Url-Scheme verbatim) are keyed too.
func TestSchemeHeadersCannotPoisonTheEntry(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		for _, name := range []string{"X-Forwarded-Proto", "X-Forwarded-Protocol", "X-Url-Scheme"} {
			if v := r.Header.Get(name); v != "" {
				scheme = v
				break
			}
		}
		if r.Header.Get("X-Forwarded-Ssl") == "on" || r.Header.Get("Front-End-Https") == "on" {
			scheme = "https://evil.example/x.js#"
		}
		fmt.Fprintf(w, `<script src="%s://%s/app.js"></script>`, scheme, r.Host)
	})
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for _, attack := range []map[string]string{
		{"X-Url-Scheme": "https://evil.example/x.js#"},
		{"X-Forwarded-Protocol": "https://evil.example/x.js#"},
		{"X-Forwarded-Ssl": "on"},
		{"Front-End-Https": "on"},
	} {
		get(t, srv.URL+"/page", attack)
		if r := get(t, srv.URL+"/page", nil); strings.Contains(r.body, "evil") {
			t.Fatalf("after %v a plain request got %s %q", attack, r.header.Get("X-Cache"), r.body)
		}
	}
}

// A handler that writes response fields under non-canonical names (copied
// from an HTTP/2 or gRPC source) sends them to its client as written; the
// storage rules see them too: a lower-case set-cookie or cache-control
// keeps the response to its own request.
func TestNonCanonicalResponseFieldsAreJudged(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header()["set-cookie"] = []string{fmt.Sprintf("session=user%d; HttpOnly", n)}
		w.Header()["cache-control"] = []string{"private"}
		fmt.Fprintf(w, "page for user%d", n)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	rawGet(t, srv.URL, "/p")
	if r := rawGet(t, srv.URL, "/p"); r.body != "page for user2" {
		t.Fatalf("the second client got %s %q (Set-Cookie %q)", r.header.Get("X-Cache"), r.body, r.header.Get("Set-Cookie"))
	}
}
