package middleware

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// A stored response's Age header counts the time it spent stored (the
// cache's Result.Age) on top of the Age it had when stored (RFC 9111
// §4.2.3, §5.1), on a full answer and on a 304 to a conditional request.
// The time stored is given, as the cache would report it after 90 s.
func TestAgeCountsTheTimeStored(t *testing.T) {
	opts := Options{}
	opts.setDefaults()
	h := &handler{opts: opts}
	const resident = 90*time.Second + 500*time.Millisecond
	for _, tc := range []struct {
		name     string
		stored   http.Header
		req      http.Header
		status   int
		wantAge  string
		wantBody string
	}{
		{"stored without Age", http.Header{}, nil, http.StatusOK, "90", "body"},
		{"stored with Age 30", http.Header{"Age": {"30"}}, nil, http.StatusOK, "120", "body"},
		{"a 304 to a conditional request", http.Header{"Age": {"30"}, "Etag": {`"v1"`}},
			http.Header{"If-None-Match": {`"v1"`}}, http.StatusNotModified, "120", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://reports.example/r", nil)
			for k, v := range tc.req {
				r.Header[k] = v
			}
			w := httptest.NewRecorder()
			res := cache.Result[Response]{Value: Response{Status: http.StatusOK, Header: tc.stored, Body: []byte("body")},
				Outcome: cache.Hit, Age: resident}
			h.respond(w, r, r, nil, res, nil)
			if w.Code != tc.status || w.Header().Get("Age") != tc.wantAge || w.Body.String() != tc.wantBody {
				t.Fatalf("%d, Age %q, body %q; want %d, Age %q, body %q",
					w.Code, w.Header().Get("Age"), w.Body.String(), tc.status, tc.wantAge, tc.wantBody)
			}
		})
	}
}

// A response answered from its own handler run (a miss, stored or not)
// carries its corrected initial age (RFC 9111 §4.2.3): the first member of
// the origin's Age, or now minus its Date, whichever is larger; never the
// origin's Age rewritten to 0.
func TestMissCarriesItsCorrectedAge(t *testing.T) {
	opts := Options{}
	opts.setDefaults()
	h := &handler{opts: opts}
	date := time.Now().Add(-100 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name   string
		header http.Header
		min    int
		max    int
	}{
		{"a list: its first member", http.Header{"Age": {"7200, 0"}}, 7200, 7200},
		{"two lines: the first", http.Header{"Age": {"7200", "0"}}, 7200, 7200},
		{"invalid, no Date", http.Header{"Age": {"abc"}}, 0, 0},
		{"Date 100 s ago", http.Header{"Date": {date}}, 100, 102},
		{"Age over Date", http.Header{"Date": {date}, "Age": {"500"}}, 500, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://reports.example/r", nil)
			w := httptest.NewRecorder()
			own := &produced{resp: Response{Status: http.StatusOK, Header: tc.header, Body: []byte("body")}}
			h.respond(w, r, r, own, cache.Result[Response]{Outcome: cache.Miss}, nil)
			age, err := strconv.Atoi(w.Header().Get("Age"))
			if err != nil || age < tc.min || age > tc.max {
				t.Fatalf("Age %q, want [%d, %d]", w.Header().Get("Age"), tc.min, tc.max)
			}
		})
	}
}
