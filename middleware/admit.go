package middleware

// Which requests use the cache, and as which request: the rules that send a
// request past the cache (credentials, a cookie the route does not name, a
// no-store, an Upgrade), and the request a cached one is keyed by and its
// handler run works on — the client's, as a GET, less the cookies the route
// ignores. What the key is made of is key.go's.

import (
	"net/http"
	"slices"
	"strings"
)

// admit returns the request r is cached as: r as a GET (HEAD is answered
// from the GET entry) whose Cookie holds only the route's VaryCookies,
// sorted by name; nil when r passes by the cache. The key is made from it
// and the handler run works on it, so that the key is what the handler
// sees.
func (h *handler) admit(r *http.Request) *http.Request {
	// Fields count by presence, on any of their lines: an empty first line
	// must not hide a credential on the second from the rule (a handler
	// may read every line).
	present := func(name string) bool { return len(r.Header[name]) > 0 }
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead,
		!h.opts.CacheAuthorized && present("Authorization"),
		present("Proxy-Authorization"),
		// A client certificate is a credential no header shows: the key
		// cannot hold it (RFC 9111 §3.5 applies as to Authorization).
		r.TLS != nil && len(r.TLS.PeerCertificates) > 0,
		present("Upgrade"),
		// Nothing of a no-store request or its response may be stored
		// (RFC 9111 §5.2.1.5); like Authorization, it costs its sender a
		// handler run of its own.
		present("Cache-Control") && parseCacheControl(r.Header).noStore:
		return nil
	}
	cookie, rewrite, ok := h.opts.cookieHeader(r)
	if !ok {
		return nil
	}
	if r.Method == http.MethodGet && !rewrite {
		return r
	}
	kr := r.WithContext(r.Context())
	kr.Method = http.MethodGet
	if rewrite {
		kr.Header = r.Header.Clone()
		if cookie == "" {
			kr.Header.Del("Cookie")
		} else {
			kr.Header["Cookie"] = []string{cookie}
		}
	}
	return kr
}

// cookieHeader returns the Cookie header r's handler run sees: the route's
// VaryCookies that r carries, sorted by name (a name's values in their
// order), and whether that differs from r's; ok is false when r carries a
// cookie the route neither ignores nor varies on (r passes by the cache). A
// route that names Cookie in VaryHeaders keys the whole header: r's is kept
// as it is.
func (o *Options) cookieHeader(r *http.Request) (value string, rewrite, ok bool) {
	lines := r.Header.Values("Cookie")
	if len(lines) == 0 || slices.Contains(o.VaryHeaders, "Cookie") {
		return "", false, true
	}
	var kept []*http.Cookie
	for _, c := range r.Cookies() {
		switch {
		case slices.Contains(o.VaryCookies, c.Name):
			kept = append(kept, c)
		case !ignoredCookie(o.IgnoreCookies, c.Name):
			return "", false, false
		}
	}
	// A cookie pair that does not parse is dropped with the ignored ones:
	// the handler run reads the header made here, never the client's.
	slices.SortStableFunc(kept, func(a, b *http.Cookie) int { return strings.Compare(a.Name, b.Name) })
	parts := make([]string, len(kept))
	for i, c := range kept {
		parts[i] = c.String() // its name and value, quoted as it came
	}
	value = strings.Join(parts, "; ")
	return value, len(lines) != 1 || lines[0] != value, true
}

// ignoredCookie reports whether a cookie name matches one of patterns: a
// name, or a prefix followed by "*".
func ignoredCookie(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, wild := strings.CutSuffix(p, "*"); wild && strings.HasPrefix(name, prefix) || p == name {
			return true
		}
	}
	return false
}

// implicitVary are the request headers every response of the route varies
// on besides its own Vary: Authorization with CacheAuthorized, Cookie (as
// admit leaves it) with VaryCookies. Their values are in the key of each
// variant; the URL's entry is a marker that leads to them, and an unsafe
// request's invalidation of the marker retires them all.
func (o *Options) implicitVary() []string {
	var names []string
	if o.CacheAuthorized {
		names = append(names, "Authorization")
	}
	if len(o.VaryCookies) > 0 && !slices.Contains(o.VaryHeaders, "Cookie") {
		names = append(names, "Cookie")
	}
	return names
}
