package middleware

import (
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Key returns the default cache key of r: the method class (HEAD shares
// GET's entries), host, path and query with parameters sorted by name
// (values keep their order), followed by the values of the request headers
// named in vary, normalised as RFC 9111 §4.1 allows (field lines combined,
// whitespace around commas dropped). Parts are length-prefixed, so distinct
// requests never produce the same key.
func Key(r *http.Request, vary []string) string {
	var b strings.Builder
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	part := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	part(method)
	part(strings.ToLower(r.Host))
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	part(path)
	part(sortedQuery(r.URL.RawQuery))
	for _, name := range vary {
		name = textproto.CanonicalMIMEHeaderKey(name)
		part(name)
		part(fieldValue(r.Header.Values(name)))
	}
	return b.String()
}

// sortedQuery re-encodes a query with its parameters sorted by name. A
// query that does not parse is kept verbatim, so it still keys distinctly.
func sortedQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "!" + raw
	}
	return q.Encode() // Encode sorts by key
}

// varyNames parses the Vary header values into canonical header names,
// sorted and deduplicated. star reports a "Vary: *".
func varyNames(h http.Header) (names []string, star bool) {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			f = strings.TrimSpace(f)
			switch f {
			case "":
			case "*":
				star = true
			default:
				names = append(names, textproto.CanonicalMIMEHeaderKey(f))
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), star
}

// variantKey is the key of a variant: the key of the request with the vary
// names of its marker, in the marker's generation.
func variantKey(key, generation string) string {
	return key + strconv.Itoa(len(generation)) + ":" + generation
}

// fieldValue is a request header's field lines combined into one value
// with the optional whitespace around its commas removed: the form in
// which two requests' values match for Vary (RFC 9111 §4.1).
func fieldValue(lines []string) string {
	var b strings.Builder
	for i, line := range lines {
		for j, item := range strings.Split(line, ",") {
			if i > 0 || j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.Trim(item, " \t"))
		}
	}
	return b.String()
}
