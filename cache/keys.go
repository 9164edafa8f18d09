package cache

import "github.com/stampede-go/stampede/cache/internal/rediskey"

// keys names one cache key's state in Redis ({ns:k}:v, :l, :n); see
// internal/rediskey, which builds every name.
type keys = rediskey.Names

func (c *Cache[V]) keysFor(key string) keys { return rediskey.For(c.opts.Namespace, key) }

// hitKeys names key for a shared read (readShared), which needs only the
// cache key.
func hitKeys(key string) keys { return rediskey.Hit(key) }

// keysForMany is keysFor for each key, in one allocation.
func (c *Cache[V]) keysForMany(names []string) []keys {
	return rediskey.ForMany(c.opts.Namespace, names)
}
