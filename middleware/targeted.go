package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Targeted cache-control fields (RFC 9213): a response can speak to caches
// of one kind (CDN-Cache-Control for CDNs and caches like this one) apart
// from Cache-Control. When the response carries the configured targeted
// field and it parses, its directives replace those of Cache-Control for
// this cache; an empty or malformed one is ignored (§2.1), and so is one in
// which no directive this cache acts on has a valid value (an invalid
// directive is ignored, §2.1: a field left with none is as if absent, so
// that `max-age="10000"` cannot override Cache-Control's no-store).

// directives returns the response directives this cache acts on.
func (o *Options) directives(h http.Header) directives {
	if o.TargetedHeader != "" && o.TargetedHeader != "-" {
		if lines := h.Values(o.TargetedHeader); len(lines) > 0 {
			if d, ok := parseTargeted(strings.Join(lines, ", ")); ok {
				return d
			}
		}
	}
	return parseCacheControl(h)
}

// parseTargeted reads a targeted field, a Structured Fields Dictionary
// (RFC 8941 §3.2); ok is false when it is empty, does not parse, or has no
// directive the cache acts on with a valid value.
func parseTargeted(field string) (d directives, ok bool) {
	d = directives{maxAge: -1, sMaxAge: -1, staleWhileRevalidate: -1, staleIfError: -1}
	p := sfParser{s: strings.Trim(field, " \t")}
	if p.s == "" {
		return d, false
	}
	valid := false // a directive the cache acts on, with a valid value
	delta := func(v sfItem) time.Duration {
		if v.kind != sfInteger || v.n < 0 {
			return -1 // another type: not a delta-seconds; the directive is ignored
		}
		valid = true
		return time.Duration(min(v.n, maxDeltaSeconds)) * time.Second
	}
	flag := func(v sfItem) bool {
		valid = true
		return v.truthy()
	}
	for {
		key, ok := p.key()
		if !ok {
			return d, false
		}
		v := sfItem{kind: sfBoolean, b: true}
		if p.eat('=') {
			if v, ok = p.itemOrInnerList(); !ok {
				return d, false
			}
		}
		if !p.params() {
			return d, false
		}
		// In a Dictionary the last member of a name wins (RFC 8941 §4.2.2).
		switch key {
		case "no-store":
			d.noStore = flag(v)
		case "private":
			d.private = flag(v)
		case "no-cache":
			d.noCache = flag(v)
		case "must-revalidate":
			d.mustRevalidate = flag(v)
		case "proxy-revalidate":
			d.proxyRevalidate = flag(v)
		case "max-age":
			d.maxAge = delta(v)
		case "s-maxage":
			d.sMaxAge = delta(v)
		case "stale-while-revalidate":
			d.staleWhileRevalidate = delta(v)
		case "stale-if-error":
			d.staleIfError = delta(v)
		}
		p.ows()
		if p.done() {
			return d, valid
		}
		if !p.eat(',') {
			return d, false
		}
		p.ows()
		if p.done() {
			return d, false // a trailing comma
		}
	}
}

type sfKind int

const (
	sfBoolean sfKind = iota
	sfInteger
	sfOther // decimal, string, token, byte sequence, inner list
)

type sfItem struct {
	kind sfKind
	n    int64
	b    bool
}

// truthy: a directive present as a bare name (true) or with any value but
// ?0 counts.
func (v sfItem) truthy() bool { return v.kind != sfBoolean || v.b }

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

func (p *sfParser) eat(c byte) bool {
	if p.peek() == c && !p.done() {
		p.i++
		return true
	}
	return false
}

func (p *sfParser) ows() {
	for p.peek() == ' ' || p.peek() == '\t' {
		p.i++
	}
}

func (p *sfParser) key() (string, bool) {
	c := p.peek()
	if !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	start := p.i
	for !p.done() {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], true
}

func (p *sfParser) params() bool {
	for p.eat(';') {
		for p.peek() == ' ' {
			p.i++
		}
		if _, ok := p.key(); !ok {
			return false
		}
		if p.eat('=') {
			if _, ok := p.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

func (p *sfParser) itemOrInnerList() (sfItem, bool) {
	if !p.eat('(') {
		return p.bareItem()
	}
	for {
		for p.peek() == ' ' {
			p.i++
		}
		if p.eat(')') {
			return sfItem{kind: sfOther}, p.params()
		}
		if _, ok := p.bareItem(); !ok || !p.params() {
			return sfItem{}, false
		}
		if c := p.peek(); c != ' ' && c != ')' {
			return sfItem{}, false
		}
	}
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) bareItem() (sfItem, bool) {
	c := p.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		p.eat('-')
		digits, dot := 0, false
		for !p.done() {
			c := p.s[p.i]
			if c >= '0' && c <= '9' {
				digits++
				p.i++
			} else if c == '.' && !dot {
				dot = true
				p.i++
			} else {
				break
			}
		}
		if digits == 0 || digits > 15 || dot && p.s[p.i-1] == '.' {
			return sfItem{}, false
		}
		if dot {
			return sfItem{kind: sfOther}, true
		}
		n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		return sfItem{kind: sfInteger, n: n}, err == nil
	case c == '"':
		p.i++
		for !p.done() {
			c := p.s[p.i]
			p.i++
			switch {
			case c == '\\':
				if n := p.peek(); n != '"' && n != '\\' {
					return sfItem{}, false
				}
				p.i++
			case c == '"':
				return sfItem{kind: sfOther}, true
			case c < 0x20 || c > 0x7e:
				return sfItem{}, false
			}
		}
		return sfItem{}, false
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		for !p.done() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return sfItem{kind: sfOther}, true
	case c == ':':
		p.i++
		for !p.done() && p.s[p.i] != ':' {
			c := p.s[p.i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
				return sfItem{}, false
			}
			p.i++
		}
		return sfItem{kind: sfOther}, p.eat(':')
	case c == '?':
		p.i++
		switch {
		case p.eat('0'):
			return sfItem{kind: sfBoolean, b: false}, true
		case p.eat('1'):
			return sfItem{kind: sfBoolean, b: true}, true
		}
	}
	return sfItem{}, false
}
