package middleware_test

// Requests with credentials: with CacheAuthorized each credential has its
// entries, so a response made for one never answers another credential or
// an anonymous request (RFC 9111 §3.5); and neither a credential nor a
// cookie the key holds reaches a Redis key name or a log line.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/internal/syncbuf"
	"github.com/stampede-go/stampede/middleware"
)

// protected answers 401 to an anonymous request and the data of the
// request's credential otherwise.
func protected(w http.ResponseWriter, r *http.Request, n int32) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		http.Error(w, "login first", http.StatusUnauthorized)
		return
	}
	fmt.Fprintf(w, "data of %s", strings.TrimPrefix(auth, "Bearer "))
}

func TestAuthorizedResponsesAnswerOnlyTheirCredential(t *testing.T) {
	h := &counting{write: protected}
	ns := redistest.Prefix(t)
	opts := middleware.Options{CacheAuthorized: true}
	s1 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), opts, h)
	s2 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), opts, h)
	steps := []struct {
		srv, auth string
		status    int
		body      string
		cached    string
	}{
		{s1.URL, "Bearer alice", 200, "data of alice", "MISS"},
		{s2.URL, "", 401, "login first\n", "MISS"},
		{s1.URL, "", 401, "login first\n", "MISS"},
		{s2.URL, "Bearer bob", 200, "data of bob", "MISS"},
		{s2.URL, "Bearer alice", 200, "data of alice", "HIT"},
		{s1.URL, "Bearer bob", 200, "data of bob", "HIT"},
	}
	for i, s := range steps {
		hdr := map[string]string{}
		if s.auth != "" {
			hdr["Authorization"] = s.auth
		}
		r := get(t, s.srv+"/me", hdr)
		if r.status != s.status || r.body != s.body || r.header.Get("X-Cache") != s.cached {
			t.Errorf("step %d (%q): %d %s %q, want %d %s %q", i, s.auth, r.status, r.header.Get("X-Cache"), r.body, s.status, s.cached, s.body)
		}
	}
	// Without CacheAuthorized, a credential passes by the cache.
	s3 := serve(t, newResponses(t, redistest.Client(t), cache.Options{Namespace: ns}), middleware.Options{}, h)
	if r := get(t, s3.URL+"/me", map[string]string{"Authorization": "Bearer carol"}); r.header.Get("X-Cache") != "BYPASS" {
		t.Errorf("without CacheAuthorized: %s", r.header.Get("X-Cache"))
	}
}

func TestCredentialsAndCookiesNeverReachRedisKeysOrLogs(t *testing.T) {
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rdb := redistest.Client(t)
	ns := redistest.Prefix(t)
	// Responses over the cache's MaxValueBytes are logged, key and all.
	c := newResponses(t, rdb, cache.Options{Namespace: ns, MaxValueBytes: 4096, Logger: logger})
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		w.Header().Set("Vary", "X-Api-Key")
		size := 10
		if r.URL.Query().Get("big") != "" {
			size = 8000
		}
		fmt.Fprintf(w, "for %s %s", r.Header.Get("Authorization"), strings.Repeat("x", size))
	}}
	srv := serve(t, c, middleware.Options{CacheAuthorized: true, VaryCookies: []string{"lang"}, Logger: logger}, h)
	for _, q := range []string{"", "?big=1"} {
		for _, hdr := range []map[string]string{
			{"Authorization": "Bearer secret-alice-token", "Cookie": "lang=secret-lang", "X-Api-Key": "secret-api-key"},
			{"Authorization": "Bearer secret-bob-token"},
		} {
			get(t, srv.URL+"/private"+q, hdr)
			get(t, srv.URL+"/private"+q, hdr)
		}
	}
	keys, err := rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine int
	for _, k := range keys {
		if strings.Contains(k, ns) {
			mine++
		}
		if strings.Contains(k, "secret") || strings.Contains(k, "Bearer") {
			t.Errorf("Redis key %q holds a credential", k)
		}
	}
	if mine == 0 {
		t.Fatal("no key of the test's namespace in Redis: nothing was checked")
	}
	if !strings.Contains(logs.String(), "not stored") {
		t.Fatalf("no log of the response too large to store: nothing was checked:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "secret") {
		t.Errorf("a log line holds a credential:\n%s", logs.String())
	}
}

// A credential passes by the cache whatever line it is on: an empty first
// Authorization line does not hide a second, and Proxy-Authorization counts
// too (a handler may read any line).
func TestCredentialOnAnyLinePassesByTheCache(t *testing.T) {
	h := &counting{write: func(w http.ResponseWriter, r *http.Request, n int32) {
		user := ""
		for _, name := range []string{"Authorization", "Proxy-Authorization"} {
			for _, v := range r.Header.Values(name) {
				if v != "" {
					user = strings.TrimPrefix(v, "Bearer ")
				}
			}
		}
		if user == "" {
			http.Error(w, "login first", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "inbox of %s", user)
	}}
	srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
	for _, attack := range [][]string{
		{"Authorization", "", "Authorization", "Bearer alice"},
		{"Proxy-Authorization", "Bearer alice"},
	} {
		if r := rawGet(t, srv.URL, "/inbox", attack...); r.header.Get("X-Cache") != "BYPASS" {
			t.Errorf("%q: %s %q, want BYPASS", attack, r.header.Get("X-Cache"), r.body)
		}
		if r := rawGet(t, srv.URL, "/inbox"); strings.Contains(r.body, "alice") {
			t.Fatalf("after %q an anonymous request got %s %q", attack, r.header.Get("X-Cache"), r.body)
		}
	}
}

// A TLS client certificate is a credential that no header shows, so the
// key cannot hold it: a request that presents one passes by the cache.
func TestClientCertificatePassesByTheCache(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "client certificate required", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "account page of %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	})
	srv := httptest.NewUnstartedServer(middleware.CacheWithOptions(newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{})(h))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	alice := srv.Client()
	alice.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	// A client of its own (srv.Client() is one client): no certificate,
	// and the loopback test server's certificate trusted as it is.
	anonymous := &http.Client{Timeout: requestBound, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(anonymous.CloseIdleConnections)
	fetch := func(c *http.Client) reply {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/account", nil)
		req.Host = host
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readReply(t, res)
	}
	if r := fetch(alice); r.body != "account page of alice" || r.header.Get("X-Cache") != "BYPASS" {
		t.Fatalf("alice: %s %q, want her page, BYPASS", r.header.Get("X-Cache"), r.body)
	}
	if r := fetch(anonymous); r.status != http.StatusUnauthorized {
		t.Fatalf("a client without a certificate got %d %s %q", r.status, r.header.Get("X-Cache"), r.body)
	}
}
