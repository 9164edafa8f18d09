package middleware_test

// Requests that joined a handler run made for another principal, whose
// response is not stored and does not select them (RFC 9111 §4.1), regroup
// by variant: the requests of one variant share one handler run of their
// own, instead of each running the handler for itself.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

func TestUnselectedJoinersShareOneRunPerVariant(t *testing.T) {
	for name, answer := range map[string]func(w http.ResponseWriter, who string){
		// The robustness suite's finding: alice's run failed (a 5xx is
		// shared, but only with the requests it selects).
		"5xx": func(w http.ResponseWriter, who string) {
			http.Error(w, "failed for "+who, http.StatusInternalServerError)
		},
		// Stale on arrival: not stored, shared with the requests it selects.
		"max-age=0": func(w http.ResponseWriter, who string) {
			w.Header().Set("Cache-Control", "max-age=0")
			fmt.Fprint(w, "page for "+who)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var runsA, runsB atomic.Int32
			releaseA, releaseB := make(chan struct{}), make(chan struct{})
			var sawIgnored atomic.Bool
			handler := func(w http.ResponseWriter, r *http.Request) {
				who := "anonymous"
				if auth := r.Header.Get("Authorization"); auth != "" {
					who = strings.TrimPrefix(auth, "Bearer ")
				}
				if c, err := r.Cookie("lang"); err == nil {
					who += "/" + c.Value
				}
				if _, err := r.Cookie("_ga"); err == nil {
					sawIgnored.Store(true)
				}
				switch who {
				case "alice/en":
					runsA.Add(1)
					parked(releaseA)
				case "anonymous/fr":
					runsB.Add(1)
					parked(releaseB)
				}
				answer(w, who+" of "+chi.URLParam(r, "id"))
			}
			responses := newResponses(t, redistest.Client(t), cache.Options{})
			router := chi.NewRouter()
			router.With(middleware.CacheWithOptions(responses, middleware.Options{
				CacheAuthorized: true, VaryCookies: []string{"lang"}, IgnoreCookies: []string{"_ga*"},
			})).Get("/pages/{id}", handler)
			srv := httptest.NewServer(router)
			t.Cleanup(srv.Close)

			// Alice's run is in flight; two requests of principal B (one
			// with an ignored cookie and an X-Forwarded-For, which the key
			// ignores) join it.
			do := func(hdr map[string]string) <-chan reply {
				ch := make(chan reply, 1)
				go func() { ch <- get(t, srv.URL+"/pages/7", hdr) }()
				return ch
			}
			alice := do(map[string]string{"Authorization": "Bearer alice", "Cookie": "lang=en"})
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 1, waitBound)
			b1 := do(map[string]string{"Cookie": "lang=fr"})
			b2 := do(map[string]string{"Cookie": "_ga=GA1.2.3; lang=fr", "X-Forwarded-For": "203.0.113.9"})
			leakcheck.WaitBlocked(t, "singleflight.(*Group[...]).Do(", 3, waitBound)
			close(releaseA)
			if r := recv(t, alice, "alice's reply"); !strings.Contains(r.body, "alice/en of 7") {
				t.Fatalf("alice got %d %q", r.status, r.body)
			}
			// Alice's response selects neither B request. Wait until they
			// either both run the handler (each for itself) or one runs it
			// and the other waits for that run.
			deadline := time.Now().Add(waitBound)
			for runsB.Load() < 2 && (runsB.Load() < 1 || leakcheck.CountParked("singleflight.(*Group[...]).Do(") < 2) {
				if time.Now().After(deadline) {
					t.Fatalf("B's requests: %d handler runs, neither both running nor one waiting on the other", runsB.Load())
				}
				time.Sleep(time.Millisecond) // parking is not observable by event: poll
			}
			close(releaseB)
			var statuses []string
			for i, ch := range []<-chan reply{b1, b2} {
				r := recv(t, ch, "B's reply")
				if !strings.Contains(r.body, "anonymous/fr of 7") {
					t.Errorf("B request %d got %d %q (%s), want B's own page", i, r.status, r.body, r.header.Get("X-Cache"))
				}
				statuses = append(statuses, r.header.Get("X-Cache"))
			}
			if n := runsB.Load(); n != 1 {
				t.Errorf("%d handler runs for B's two requests (X-Cache %v), want 1", n, statuses)
			}
			if n := runsA.Load(); n != 1 {
				t.Errorf("%d handler runs for alice, want 1", n)
			}
			if sawIgnored.Load() {
				t.Error("a handler run saw the ignored cookie")
			}
		})
	}
}
