package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// get sends a request and returns its X-Cache and body.
func get(t *testing.T, method, url string, header ...string) (xcache, body string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s, %v", method, url, res.Status, err)
	}
	return res.Header.Get("X-Cache"), string(b)
}

// TestRoutesAreCachedAsThePageSays runs the page's program against a real
// redis-server and a real origin, and holds what docs/http.md says of it:
// on the chi router and on the plain mux, the first request for a URL runs
// the handler and the next is a HIT, and HEAD is answered from the GET
// entry; concurrent requests for a new URL run the handler once; the
// dashboards' entries vary by X-Tenant; in front of the proxy, with
// DeclaredFreshnessOnly, a response that declares its freshness is reused
// and one that declares none is not stored.
func TestRoutesAreCachedAsThePageSays(t *testing.T) {
	var fresh, undeclared atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fresh":
			w.Header().Set("Cache-Control", "max-age=60")
			io.WriteString(w, "fresh\n")
			fresh.Add(1)
		default:
			io.WriteString(w, "no freshness declared\n")
			undeclared.Add(1)
		}
	}))
	defer origin.Close()
	_, addrs := exampletest.Start(t, 2, func(a []string) []string {
		return []string{"-redis", redistest.Addr(t), "-listen", a[0], "-listen-plain", a[1], "-upstream", origin.URL}
	})
	chiAddr, plainAddr := addrs[0], addrs[1]

	for _, base := range []string{"http://" + chiAddr, "http://" + plainAddr} {
		url := base + "/reports/1"
		xc, first := get(t, "GET", url)
		if xc != "MISS" {
			t.Errorf("first GET %s: X-Cache %q, want MISS", url, xc)
		}
		if xc, body := get(t, "GET", url); xc != "HIT" || body != first {
			t.Errorf("second GET %s: X-Cache %q, body %q; want HIT, %q", url, xc, body, first)
		}
		if xc, _ := get(t, "HEAD", url); xc != "HIT" {
			t.Errorf("HEAD %s: X-Cache %q, want HIT (answered from the GET entry)", url, xc)
		}

		url = base + "/reports/2"
		bodies := make([]string, 20)
		var wg sync.WaitGroup
		for i := range bodies {
			wg.Go(func() {
				res, err := http.Get(url)
				if err != nil {
					bodies[i] = err.Error()
					return
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				bodies[i] = string(b)
			})
		}
		wg.Wait()
		for _, b := range bodies {
			if b != bodies[0] {
				t.Errorf("20 concurrent GET %s: bodies %q and %q: the handler ran more than once", url, bodies[0], b)
				break
			}
		}
	}

	dash := "http://" + chiAddr + "/dashboards/9"
	_, a := get(t, "GET", dash, "X-Tenant", "a")
	_, b := get(t, "GET", dash, "X-Tenant", "b")
	if !strings.Contains(a, `tenant "a"`) || !strings.Contains(b, `tenant "b"`) {
		t.Errorf("dashboards by tenant: %q, %q: one tenant was served the other's", a, b)
	}
	if xc, again := get(t, "GET", dash, "X-Tenant", "a"); xc != "HIT" || again != a {
		t.Errorf("tenant a again: X-Cache %q, %q; want HIT, %q", xc, again, a)
	}

	for range 2 {
		get(t, "GET", "http://"+plainAddr+"/fresh")
		get(t, "GET", "http://"+plainAddr+"/undeclared")
	}
	if fresh.Load() != 1 || undeclared.Load() != 2 {
		t.Errorf("the origin answered /fresh (max-age=60) %d times and /undeclared (no freshness) %d times for 2 requests each, want 1 and 2", fresh.Load(), undeclared.Load())
	}
}
