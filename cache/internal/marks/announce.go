package marks

import (
	"fmt"
	"strings"

	"github.com/stampede-go/stampede/cache/internal/envelope"
)

// An invalidation's announcement to the other replicas: the payload sent
// on the invalidation channel, and the marks raised when one is made here
// or arrives from another replica (marks.go).

// RaiseAll records an invalidation of tags (nil: the namespace) at gen,
// made or announced, without vouching for anything else.
func (m *Marks) RaiseAll(tags []string, gen uint64, soft bool) {
	m.Saw(gen)
	mk := Mark{Hard: gen}
	if soft {
		mk = Mark{Soft: gen}
	}
	if tags == nil {
		m.ns.raise(mk, 0)
		return
	}
	for _, t := range tags {
		m.slot(t).raise(mk, 0)
	}
}

// Announcement is the payload that tells other replicas of an invalidation
// at gen: "\x00" kind gen tags..., kind 'h' or 's', the namespace as "*".
func Announcement(tags []string, gen uint64, soft bool) string {
	var b strings.Builder
	b.WriteString("\x00")
	if soft {
		b.WriteString("s ")
	} else {
		b.WriteString("h ")
	}
	fmt.Fprint(&b, gen)
	if tags == nil {
		b.WriteString(" " + namespaceTag)
	}
	for _, t := range tags {
		b.WriteString(" " + t)
	}
	return b.String()
}

// Announced applies another replica's announcement (a payload made by
// Announcement, "\x00" first); anything malformed is ignored (the marks
// are read anyway when their trust runs out).
func (m *Marks) Announced(payload string) {
	f := strings.Fields(payload[1:])
	if len(f) < 3 || (f[0] != "h" && f[0] != "s") {
		return
	}
	var gen uint64
	if _, err := fmt.Sscan(f[1], &gen); err != nil || gen > maxGen {
		return
	}
	for _, t := range f[2:] {
		switch {
		case t == namespaceTag:
			m.RaiseAll(nil, gen, f[0] == "s")
		case envelope.ValidTag(t):
			m.RaiseAll([]string{t}, gen, f[0] == "s")
		}
	}
}
