package redisstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/stampede-go/stampede/cache/internal/redisstep"
)

// EvictionRisk returns why the server's memory settings put the cache at
// risk, or "" when they do not or cannot be read (CONFIG disabled, as on
// some managed Redis): with a maxmemory and the noeviction policy, a full
// Redis refuses every write, so every new key is computed and answered
// Degraded; an allkeys-* policy may evict the invalidation marks and
// counters, which carry no TTL. The volatile-* policies evict only keys
// with a TTL: entries and leases.
func (s *Store) EvictionRisk(ctx context.Context) string {
	cfg, err := redisstep.Run(ctx, s.budget, func(ctx context.Context) (map[string]string, error) {
		return s.rdb.ConfigGet(ctx, "maxmemory*").Result()
	})
	if err != nil {
		return ""
	}
	maxmemory, _ := strconv.ParseInt(cfg["maxmemory"], 10, 64)
	switch policy := cfg["maxmemory-policy"]; {
	case maxmemory <= 0:
		return ""
	case policy == "noeviction":
		return "maxmemory is set with maxmemory-policy noeviction: once Redis is full every new key is computed and answered Degraded; use volatile-lfu or volatile-lru"
	case strings.HasPrefix(policy, "allkeys-"):
		return "maxmemory-policy " + policy + " may evict invalidation marks, which have no TTL; use volatile-lfu or volatile-lru"
	}
	return ""
}
