package middleware

import (
	"net/http"
	"net/http/httptest"
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
			h.respond(w, r, nil, res, nil)
			if w.Code != tc.status || w.Header().Get("Age") != tc.wantAge || w.Body.String() != tc.wantBody {
				t.Fatalf("%d, Age %q, body %q; want %d, Age %q, body %q",
					w.Code, w.Header().Get("Age"), w.Body.String(), tc.status, tc.wantAge, tc.wantBody)
			}
		})
	}
}
