package middleware

import (
	"net/http"
	"strings"
	"time"
)

// Strict parsers for the header fields whose value decides freshness:
// HTTP-date (Expires, Date, Last-Modified) and Age. http.ParseTime is
// lenient (it takes a one-digit hour, and collapses runs of spaces), and an
// Expires it misreads as valid keeps a response fresh that RFC 9111 §5.3
// says is already expired.

// The three forms of HTTP-date (RFC 9110 §5.6.7), as shapes: 'a' is a
// letter, 'd' a digit, '_' a digit or a space, anything else itself.
// IMF-fixdate, then the two obsolete forms a recipient must accept.
var httpDateForms = []struct{ shape, layout string }{
	{"aaa, dd aaa dddd dd:dd:dd GMT", "Mon, 02 Jan 2006 15:04:05 MST"},
	{"a, dd-aaa-dd dd:dd:dd GMT", "Monday, 02-Jan-06 15:04:05 MST"}, // rfc850-date; the day name is any length
	{"aaa aaa _d dd:dd:dd dddd", "Mon Jan _2 15:04:05 2006"},        // asctime-date
}

// parseHTTPDate parses an HTTP-date strictly: one of the three forms of
// RFC 9110 §5.6.7, single spaces, two-digit hours, minutes and seconds.
// Day and month names and "GMT" are matched without regard to case, as the
// RFC encourages a recipient to be robust in parsing timestamps; ok is
// false for anything else.
func parseHTTPDate(s string) (t time.Time, ok bool) {
	for _, f := range httpDateForms {
		v, fits := fitShape(s, f.shape)
		if !fits {
			continue
		}
		t, err := time.Parse(f.layout, v)
		if err != nil {
			return time.Time{}, false
		}
		return t.UTC(), true
	}
	return time.Time{}, false
}

// fitShape reports whether s has shape (see httpDateForms) and returns s
// with its names in the case time.Parse wants. An 'a' at the start of a
// shape whose next byte is ',' stands for a day name of any length.
func fitShape(s, shape string) (string, bool) {
	b := []byte(s)
	if strings.HasPrefix(shape, "a,") {
		i := strings.IndexByte(s, ',')
		if i < 6 || i > 9 { // Monday .. Wednesday
			return "", false
		}
		for _, c := range b[:i] {
			if !isLetter(c) {
				return "", false
			}
		}
		shape = strings.Repeat("a", i) + shape[1:]
	}
	if len(b) != len(shape) {
		return "", false
	}
	word := true // at the start of a name
	for i := range len(shape) {
		c, want := b[i], shape[i]
		switch want {
		case 'a':
			if !isLetter(c) {
				return "", false
			}
			if word {
				b[i] = upper(c)
			} else {
				b[i] = lower(c)
			}
			word = false
			continue
		case 'd':
			if c < '0' || c > '9' {
				return "", false
			}
		case '_':
			if c != ' ' && (c < '0' || c > '9') {
				return "", false
			}
		case 'G', 'M', 'T':
			if upper(c) != want {
				return "", false
			}
			b[i] = want
		default:
			if c != want {
				return "", false
			}
		}
		word = true
	}
	return string(b), true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c - 'A' + 'a'
	}
	return c
}

// headerDate parses the single value of the date field name in h; ok is
// false when it is absent, repeated or invalid.
func headerDate(h http.Header, name string) (time.Time, bool) {
	v := h.Values(name)
	if len(v) != 1 {
		return time.Time{}, false
	}
	return parseHTTPDate(v[0])
}

// ageValue is the response's Age (RFC 9111 §5.1): of a list (one line with
// commas, or several lines) the first member counts, and an invalid one is
// ignored (0). Past 2^31 s it saturates.
func ageValue(h http.Header) time.Duration {
	v := h.Values("Age")
	if len(v) == 0 {
		return 0
	}
	first, _, _ := strings.Cut(v[0], ",")
	return max(seconds(strings.TrimSpace(first)), 0)
}
