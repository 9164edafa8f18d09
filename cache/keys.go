package cache

import "strings"

// keys names one cache key's state in Redis. Every name shares the hash tag
// {ns:k}, so every script touches one Cluster slot: the value {ns:k}:v (the
// only key at rest), the lease {ns:k}:l (only while a compute runs) and the
// fill channel {ns:k}:n.
// Only the value's name is built eagerly (the hit path needs nothing else);
// the others are slices or short concatenations of it.
type keys struct {
	key   string // the cache key
	value string // {ns:k}:v
}

func (c *Cache[V]) keysFor(key string) keys {
	return keys{key: key, value: "{" + c.opts.Namespace + ":" + key + "}:v"}
}

// hitKeys names key for a shared read (readShared), which needs only the
// cache key: the store builds the value key's name when it sends a GET, so
// the callers that join a GET in flight allocate nothing for it.
func hitKeys(key string) keys { return keys{key: key} }

// keysForMany is keysFor for each key, with all the value keys slices of
// one string: one allocation, not one per key.
func (c *Cache[V]) keysForMany(names []string) []keys {
	var b strings.Builder
	size := 0
	for _, k := range names {
		size += len(c.opts.Namespace) + len(k) + 5
	}
	b.Grow(size)
	for _, k := range names {
		b.WriteString("{")
		b.WriteString(c.opts.Namespace)
		b.WriteString(":")
		b.WriteString(k)
		b.WriteString("}:v")
	}
	all := b.String()
	ks := make([]keys, len(names))
	at := 0
	for i, k := range names {
		n := len(c.opts.Namespace) + len(k) + 5
		ks[i] = keys{key: k, value: all[at : at+n]}
		at += n
	}
	return ks
}

// tag is {ns:k}.
func (k keys) tag() string { return k.value[:len(k.value)-2] }

func (k keys) lease() string   { return k.tag() + ":l" }
func (k keys) channel() string { return k.tag() + ":n" }

// invKey is the namespace's invalidation counter and Clear mark, {ns}:inv
// (a hash: 'g' the counter, 'h' and 's' the hard and soft marks). No key of
// an entry collides with it: theirs hold "ns:" inside the braces.
func (c *Cache[V]) invKey() string { return "{" + c.opts.Namespace + "}:inv" }

// markKey is tag's mark, {ns:tag}:t (a hash: 'h' hard, 's' soft), or the
// namespace's for "". It shares a slot with the cache key named like the
// tag, never a name: an entry's names end in :v, :l or :n.
func (c *Cache[V]) markKey(tag string) string {
	if tag == "" {
		return c.invKey()
	}
	return "{" + c.opts.Namespace + ":" + tag + "}:t"
}
