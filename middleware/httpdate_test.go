package middleware

import (
	"net/http"
	"testing"
	"time"
)

// HTTP-date is parsed strictly (RFC 9110 §5.6.7): IMF-fixdate and the two
// obsolete forms; double spaces, a one-digit hour, another zone or a
// two-digit year in IMF-fixdate are invalid. Names (and GMT) are matched
// without regard to case, as the public cache-tests suite expects.
func TestHTTPDateIsParsedStrictly(t *testing.T) {
	want := time.Date(2050, time.August, 18, 2, 1, 18, 0, time.UTC)
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"Thu, 18 Aug 2050 02:01:18 GMT", true},
		{"Thursday, 18-Aug-50 02:01:18 GMT", true},
		{"Thu Aug 18 02:01:18 2050", true},
		{"THU, 18 AUG 2050 02:01:18 gmt", true},
		{"Thu, 18 Aug 2050 02:01:18 gMT", true},
		{"Thu, 18  Aug  2050 02:01:18 GMT", false},
		{"Thu, 18 Aug 2050 2:01:18 GMT", false},
		{"Thu, 18 Aug 2050 02:01:18 UTC", false},
		{"Thu, 18 Aug 2050 02:01:18 AEST", false},
		{"Thu, 18 Aug 50 02:01:18 GMT", false},
		{"Thu 18 Aug 2050 02:01:18 GMT", false},
		{"Thu, 18-Aug-2050 02:01:18 GMT", false},
		{"Thu, 18 Aug 2050 02.01.18 GMT", false},
		{"Thu, 32 Aug 2050 02:01:18 GMT", false},
		{"Thu, 18 Aug 2050 25:01:18 GMT", false},
		{"0", false},
		{"", false},
		{" Thu, 18 Aug 2050 02:01:18 GMT", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := parseHTTPDate(tc.in)
			if ok != tc.ok || ok && !got.Equal(want) {
				t.Fatalf("parseHTTPDate(%q) = %v, %v; want ok %v (%v)", tc.in, got, ok, tc.ok, want)
			}
		})
	}
	if got, ok := parseHTTPDate("Thu Aug  8 02:01:18 2050"); !ok || got.Day() != 8 {
		t.Fatalf("asctime with a one-digit day: %v %v", got, ok)
	}
}

// An Expires that is invalid (malformed, or more than one) means already
// expired (RFC 9111 §5.3); a valid one less Date is the lifetime.
func TestInvalidExpiresMeansExpired(t *testing.T) {
	now := time.Date(2050, time.August, 18, 1, 1, 18, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	for _, tc := range []struct {
		name    string
		expires []string
		want    time.Duration
	}{
		{"valid", []string{"Thu, 18 Aug 2050 02:01:18 GMT"}, time.Hour},
		{"multiple spaces", []string{"Thu, 18  Aug  2050 02:01:18 GMT"}, 0},
		{"one-digit hour", []string{"Thu, 18 Aug 2050 2:01:18 GMT"}, 0},
		{"two lines", []string{"Thu, 18 Aug 2050 02:01:18 GMT", "Thu, 18 Aug 2050 02:01:19 GMT"}, 0},
		{"zero", []string{"0"}, 0},
		{"far future: saturated at 2^31 s", []string{"Sun, 21 Nov 2286 04:46:39 GMT"}, maxDeltaSeconds * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Date": {date}, "Expires": tc.expires}
			got, declared := freshnessLifetime(parseCacheControl(h), h, now)
			if !declared || got != tc.want {
				t.Fatalf("lifetime %v declared %v; want %v", got, declared, tc.want)
			}
		})
	}
}

// Age is one non-negative integer; of a list the first member counts, and
// an invalid one is ignored (RFC 9111 §5.1).
func TestAgeIsTheFirstMemberAndInvalidIsIgnored(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  []string
		want time.Duration
	}{
		{"absent", nil, 0},
		{"plain", []string{"7200"}, 7200 * time.Second},
		{"suffix", []string{"7200, 0"}, 7200 * time.Second},
		{"prefix", []string{"0, 7200"}, 0},
		{"two lines, old first", []string{"7200", "0"}, 7200 * time.Second},
		{"two lines, old last", []string{"0", "7200"}, 0},
		{"non-numeric", []string{"abc"}, 0},
		{"negative", []string{"-7200"}, 0},
		{"float", []string{"7200.0"}, 0},
		{"parameter", []string{"7200;foo=bar"}, 0},
		{"saturates", []string{"99999999999999999999"}, maxDeltaSeconds * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ageValue(http.Header{"Age": tc.age}); got != tc.want {
				t.Fatalf("ageValue(%q) = %v, want %v", tc.age, got, tc.want)
			}
		})
	}
}

// FuzzFreshnessParsers: the HTTP-date, Age, Cache-Control and targeted
// (CDN-Cache-Control) parsers never panic, a date they accept is what its
// own IMF-fixdate form reads back as, and an Age is never negative.
func FuzzFreshnessParsers(f *testing.F) {
	for _, s := range []string{"Thu, 18 Aug 2050 02:01:18 GMT", "Thursday, 18-Aug-50 02:01:18 GMT",
		"Thu Aug  8 02:01:18 2050", "Thu, 18  Aug  2050 2:01:18 gmt", "7200, 0", "max-age=3600, s-maxage=x", "-1", "",
		`max-age=10, x=("a" 1.5);p=:aGk=:, y=?0`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := parseHTTPDate(s); ok {
			back, ok := parseHTTPDate(d.Format(http.TimeFormat))
			if !ok || !back.Equal(d) {
				t.Fatalf("%q parsed as %v, which reads back as %v %v", s, d, back, ok)
			}
		}
		if a := ageValue(http.Header{"Age": {s}}); a < 0 {
			t.Fatalf("Age %q = %v", s, a)
		}
		if d, ok := parseTargeted(s); ok && (d.maxAge < -1 || d.maxAge > maxDeltaSeconds*time.Second) {
			t.Fatalf("targeted %q: max-age %v", s, d.maxAge)
		}
		h := http.Header{"Cache-Control": {s}, "Expires": {s}, "Date": {s}}
		if l, _ := freshnessLifetime(parseCacheControl(h), h, time.Now()); l < 0 {
			t.Fatalf("lifetime %v of %q", l, s)
		}
	})
}
