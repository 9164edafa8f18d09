package middleware_test

// Whose response a request that joined a handler run may be answered with:
// a run's response that is not stored goes to a joiner only when it is
// shareable and the joiner's own request would select it (RFC 9111 §4.1:
// the same values of every header it varies on); a failed run's response
// that carries one client's state (Set-Cookie, private, no-store) goes to
// no other request.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware"
)

func TestFailedRunWithOneClientsStateStaysWithItsRequest(t *testing.T) {
	for name, failure := range map[string]func(w http.ResponseWriter, client string){
		"Set-Cookie": func(w http.ResponseWriter, client string) {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: client + "-renewed"})
		},
		"private":  func(w http.ResponseWriter, _ string) { w.Header().Set("Cache-Control", "private") },
		"no-store": func(w http.ResponseWriter, _ string) { w.Header().Set("Cache-Control", "no-store") },
	} {
		t.Run(name, func(t *testing.T) {
			h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
				client := r.Header.Get("X-Client")
				failure(w, client)
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "dashboard of %s failed", client)
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), middleware.Options{}, h)
			for i, r := range clientsOnOneRun(t, srv.URL+"/dashboard", 6, h.release) {
				if want := fmt.Sprintf("dashboard of %d failed", i); r.body != want {
					t.Errorf("client %d got %q (%s), want its own failure", i, r.body, r.header.Get("X-Cache"))
				}
				if sc := r.header.Get("Set-Cookie"); sc != "" && !strings.HasPrefix(sc, fmt.Sprintf("session=%d-", i)) {
					t.Errorf("client %d got Set-Cookie %q", i, sc)
				}
			}
		})
	}
}

// A shareable response that is not stored (stale on arrival, or without a
// declared lifetime under DeclaredFreshnessOnly) and varies on a request
// header answers only the joiners with the leader's value of it.
func TestUnstoredResponseAnswersOnlyTheJoinersItsRequestSelects(t *testing.T) {
	for name, tc := range map[string]struct {
		cacheControl string
		opts         middleware.Options
		vary         string                        // the response's Vary
		user         func(i int) map[string]string // client i's headers
		whose        func(r *http.Request) string
	}{
		"max-age=0": {"max-age=0", middleware.Options{}, "X-User",
			func(i int) map[string]string { return map[string]string{"X-User": fmt.Sprint("user", i%3)} },
			func(r *http.Request) string { return r.Header.Get("X-User") }},
		"declared-freshness-only": {"", middleware.Options{DeclaredFreshnessOnly: true}, "X-User",
			func(i int) map[string]string { return map[string]string{"X-User": fmt.Sprint("user", i%3)} },
			func(r *http.Request) string { return r.Header.Get("X-User") }},
		"vary-cookies": {"max-age=0", middleware.Options{VaryCookies: []string{"lang"}}, "",
			func(i int) map[string]string { return map[string]string{"Cookie": fmt.Sprint("lang=l", i%3)} },
			func(r *http.Request) string {
				c, _ := r.Cookie("lang")
				return "user" + strings.TrimPrefix(c.Value, "l")
			}},
	} {
		t.Run(name, func(t *testing.T) {
			h := &counting{release: make(chan struct{}), write: func(w http.ResponseWriter, r *http.Request, n int32) {
				if tc.vary != "" {
					w.Header().Set("Vary", tc.vary)
				}
				if tc.cacheControl != "" {
					w.Header().Set("Cache-Control", tc.cacheControl)
				}
				fmt.Fprintf(w, "inbox of %s", tc.whose(r))
			}}
			srv := serve(t, newResponses(t, redistest.Client(t), cache.Options{}), tc.opts, h)
			hdrs := make([]map[string]string, 9)
			for i := range hdrs {
				hdrs[i] = tc.user(i)
			}
			for i, r := range requestsOnOneRun(t, srv.URL+"/inbox", hdrs, h.release) {
				if want := fmt.Sprint("inbox of user", i%3); r.body != want {
					t.Errorf("client %d (%v) got %q (%s), want %q", i, hdrs[i], r.body, r.header.Get("X-Cache"), want)
				}
			}
		})
	}
}
