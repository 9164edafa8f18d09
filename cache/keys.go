package cache

import "github.com/stampede-go/stampede/lease"

// keys are the Redis names of one cache key's state. All share the hash tag
// {ns:k}, so every script touches one Cluster slot.
type keys struct {
	key     string // the cache key
	name    string // ns:k, the lease name
	value   string // {ns:k}:v
	lease   string // {ns:k}:l
	fence   string // {ns:k}:f
	channel string // {ns:k}:n
}

func (c *Cache[V]) keysFor(key string) keys {
	name := c.opts.Namespace + ":" + key
	l, f := lease.Keys(name)
	tag := "{" + name + "}"
	return keys{key: key, name: name, value: tag + ":v", lease: l, fence: f, channel: tag + ":n"}
}

// shardArg tells the scripts how to announce on a key's channel: "1" for
// SPUBLISH on a Cluster (the channel lives on the key's own shard, as the
// waiters' SSUBSCRIBE does), "0" for PUBLISH.
func (c *Cache[V]) shardArg() string {
	if c.notify.sharded() {
		return "1"
	}
	return "0"
}

// valueKey is keysFor(key).value, built alone for the hit path.
func (c *Cache[V]) valueKey(key string) string {
	return "{" + c.opts.Namespace + ":" + key + "}:v"
}
