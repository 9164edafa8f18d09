package middleware

import (
	"testing"
	"time"
)

// A targeted field (RFC 9213) is a Structured Fields Dictionary (RFC 8941):
// one that does not parse is ignored as a whole; a member of the wrong type
// is ignored alone, and a field left with no valid directive the cache acts
// on is ignored as a whole (it cannot override Cache-Control).
func TestTargetedFieldParsing(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		field  string
		ok     bool
		maxAge time.Duration
		flags  string // n: no-store, p: private, c: no-cache, m: must-revalidate
	}{
		{"max-age=3600", true, 3600 * s, ""},
		{"max-age=99999999999", true, maxDeltaSeconds * s, ""},
		{"foobar, max-age=3600", true, 3600 * s, ""},
		{"foobar", false, 0, ""},
		{`max-age="10000", private`, true, -1, "p"},
		{"private", true, -1, "p"},
		{"no-store, no-cache;x=1, must-revalidate", true, -1, "ncm"},
		{"no-store=?0", true, -1, ""},
		{`max-age="10000"`, false, 0, ""},
		{"max-age=1.5", false, 0, ""},
		{"max-age=-1", false, 0, ""},
		{"max-age=(1 2)", false, 0, ""},
		{"max-age=:aGk=:, x=tok/en, y=?1", false, 0, ""},
		{"max-age=10, &&&&&", false, 0, ""},
		{"max-age =100", false, 0, ""},
		{"max-age= 100", false, 0, ""},
		{"MaX-aGe=3600", false, 0, ""},
		{"max-age=10,", false, 0, ""},
		{"", false, 0, ""},
		{"max-age=1234567890123456", false, 0, ""},
	} {
		t.Run(tc.field, func(t *testing.T) {
			d, ok := parseTargeted(tc.field)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			flags := ""
			for _, f := range []struct {
				on bool
				c  string
			}{{d.noStore, "n"}, {d.private, "p"}, {d.noCache, "c"}, {d.mustRevalidate, "m"}} {
				if f.on {
					flags += f.c
				}
			}
			if d.maxAge != tc.maxAge || flags != tc.flags {
				t.Fatalf("max-age %v, flags %q; want %v, %q", d.maxAge, flags, tc.maxAge, tc.flags)
			}
		})
	}
}
