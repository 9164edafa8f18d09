// Package rediskey names a cache's state in Redis. Every name of one cache
// key shares the hash tag {ns:k}, so every script touches one Cluster slot:
// the value {ns:k}:v (the only key at rest), the lease {ns:k}:l (only while
// a compute runs) and the fill channel {ns:k}:n. The namespace's
// invalidation counter is {ns}:inv and a tag's mark {ns:tag}:t.
//
// The names are part of the stored format: replicas of different versions
// share them, so they never change.
package rediskey

import "strings"

// Names names one cache key's state in Redis. Only the value's name is
// built eagerly (the hit path needs nothing else); the others are slices or
// short concatenations of it.
type Names struct {
	Key   string // the cache key
	Value string // {ns:k}:v; "" in Names from Hit
}

// For names key's state in namespace ns.
func For(ns, key string) Names {
	return Names{Key: key, Value: "{" + ns + ":" + key + "}:v"}
}

// Hit names key for a shared read, which needs only the cache key: the
// store builds the value key's name when it sends a GET, so the callers
// that join a GET in flight allocate nothing for it. Its Value is "".
func Hit(key string) Names { return Names{Key: key} }

// ForMany is For for each key, with all the value keys slices of one
// string: one allocation, not one per key.
func ForMany(ns string, keys []string) []Names {
	var b strings.Builder
	size := 0
	for _, k := range keys {
		size += len(ns) + len(k) + 5
	}
	b.Grow(size)
	for _, k := range keys {
		b.WriteString("{")
		b.WriteString(ns)
		b.WriteString(":")
		b.WriteString(k)
		b.WriteString("}:v")
	}
	all := b.String()
	out := make([]Names, len(keys))
	at := 0
	for i, k := range keys {
		n := len(ns) + len(k) + 5
		out[i] = Names{Key: k, Value: all[at : at+n]}
		at += n
	}
	return out
}

// Tag is the hash tag {ns:k}.
func (n Names) Tag() string { return n.Value[:len(n.Value)-2] }

// Lease is the lease's name, {ns:k}:l.
func (n Names) Lease() string { return n.Tag() + ":l" }

// Channel is the fill channel's name, {ns:k}:n.
func (n Names) Channel() string { return n.Tag() + ":n" }

// Inv is the namespace's invalidation counter and Clear mark, {ns}:inv (a
// hash: 'g' the counter, 'h' and 's' the hard and soft marks). No key of an
// entry collides with it: theirs hold "ns:" inside the braces.
func Inv(ns string) string { return "{" + ns + "}:inv" }

// Mark is tag's mark, {ns:tag}:t (a hash: 'h' hard, 's' soft), or the
// namespace's (Inv) for "". It shares a slot with the cache key named like
// the tag, never a name: an entry's names end in :v, :l or :n.
func Mark(ns, tag string) string {
	if tag == "" {
		return Inv(ns)
	}
	return "{" + ns + ":" + tag + "}:t"
}
