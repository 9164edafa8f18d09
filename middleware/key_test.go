package middleware

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

func request(host, path, rawQuery, lang string) *http.Request {
	r := &http.Request{Method: http.MethodGet, Host: host, URL: &url.URL{Path: path, RawQuery: rawQuery}, Header: http.Header{}}
	if lang != "" {
		r.Header.Set("Accept-Language", lang)
	}
	return r
}

func TestKeyParts(t *testing.T) {
	vary := []string{"Accept-Language"}
	same := [][2]*http.Request{
		{request("h", "/p", "", "en"), request("h", "/p", "", "en")},
	}
	for _, p := range same {
		if Key(p[0], vary) != Key(p[1], vary) {
			t.Errorf("%q != %q", Key(p[0], vary), Key(p[1], vary))
		}
	}
	differ := [][2]*http.Request{
		{request("h", "/p", "x=1", ""), request("h", "/p", "x=2", "")},
		{request("h", "/p", "", "en"), request("h", "/p", "", "fr")},
		{request("h", "/a", "b", ""), request("h", "/a?b", "", "")},
		{request("h1", "/p", "", ""), request("h", "1/p", "", "")},
		// The host as sent: a router matches host patterns as sent.
		{request("a.example", "/p", "", ""), request("A.example", "/p", "", "")},
		{request("h", "/p", "x=1&x=2", ""), request("h", "/p", "x=2&x=1", "")}, // value order matters
		// The query as sent: a handler reading RawQuery sees each form.
		{request("h", "/p", "x=1&y=2", ""), request("h", "/p", "y=2&x=1", "")},
		{request("h", "/p", `q=%22%3E`, ""), request("h", "/p", `q=">`, "")},
	}
	for _, p := range differ {
		if Key(p[0], vary) == Key(p[1], vary) {
			t.Errorf("distinct requests share key %q", Key(p[0], vary))
		}
	}
	// Vary values match after combining field lines and dropping the
	// whitespace around commas (RFC 9111 §4.1).
	lines := request("h", "/p", "", "en")
	lines.Header.Add("Accept-Language", "fr ,de")
	if Key(lines, vary) != Key(request("h", "/p", "", "en, fr,de"), vary) ||
		Key(lines, vary) == Key(request("h", "/p", "", "en,frde"), vary) {
		t.Error("Vary values are not normalised as RFC 9111 §4.1 allows")
	}
	head := request("h", "/p", "", "")
	head.Method = http.MethodHead
	if Key(head, nil) != Key(request("h", "/p", "", ""), nil) {
		t.Error("HEAD does not share GET's key")
	}
}

// FuzzKey: no panics, and two requests share a key only when their
// normalised parts are equal.
func FuzzKey(f *testing.F) {
	f.Add("h", "/p", "a=1&b=2", "en", "h", "/p", "b=2&a=1", "en")
	f.Add("h", "/a", "b", "", "h", "/a?b", "", "")
	f.Add("x", "/{}", "%zz", "\x00", "X", "/{}", "%zz", "\x00")
	f.Fuzz(func(t *testing.T, h1, p1, q1, l1, h2, p2, q2, l2 string) {
		vary := []string{"Accept-Language"}
		r1, r2 := request(h1, p1, q1, l1), request(h2, p2, q2, l2)
		k1, k2 := Key(r1, vary), Key(r2, vary)
		if k1 != Key(r1, vary) {
			t.Fatal("Key is not deterministic")
		}
		sameParts := h1 == h2 && requestPath(r1) == requestPath(r2) &&
			q1 == q2 &&
			fieldValue(r1.Header.Values("Accept-Language")) == fieldValue(r2.Header.Values("Accept-Language"))
		if (k1 == k2) != sameParts {
			t.Fatalf("keys equal=%v but parts equal=%v: %q %q", k1 == k2, sameParts, k1, k2)
		}
	})
}

// requestPath is the path a server sees, decoded and as sent: an empty one
// is "/" (RFC 9110 §4.2.3), as Key has it.
func requestPath(r *http.Request) string {
	if p := r.URL.Path; p != "" {
		return p + "\x00" + r.URL.RawPath
	}
	return "/\x00" + r.URL.RawPath
}

func TestParseCacheControl(t *testing.T) {
	h := http.Header{}
	h.Add("Cache-Control", `public, max-age=60, s-maxage="120"`)
	h.Add("Cache-Control", "stale-while-revalidate=30, stale-if-error=bogus, Private")
	d := parseCacheControl(h)
	if d.maxAge.Seconds() != 60 || d.sMaxAge.Seconds() != 120 ||
		d.staleWhileRevalidate.Seconds() != 30 || d.staleIfError != -1 || !d.private || d.noStore {
		t.Fatalf("%+v", d)
	}
	// RFC 9111 §1.2.2: a delta-seconds too large to represent saturates at 2^31.
	if d := parseCacheControl(http.Header{"Cache-Control": {"max-age=99999999999999999999"}}); d.maxAge != (1<<31)*time.Second {
		t.Fatalf("overflowing max-age: %v", d.maxAge)
	}
	// An invalid lifetime makes the response stale, never fresh for the default TTL.
	for _, v := range []string{"max-age=-5", "max-age=abc", "max-age="} {
		if d := parseCacheControl(http.Header{"Cache-Control": {v}}); d.maxAge != 0 {
			t.Fatalf("%s: %v", v, d.maxAge)
		}
	}
	// The first occurrence of a directive counts (§4.2.1).
	if d := parseCacheControl(http.Header{"Cache-Control": {"max-age=10, max-age=20"}}); d.maxAge != 10*time.Second {
		t.Fatalf("duplicate max-age: %v", d.maxAge)
	}
}
