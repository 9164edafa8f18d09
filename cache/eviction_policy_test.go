package cache_test

// Ping warns, once, when Redis' memory settings put the cache at risk: a
// maxmemory with noeviction refuses every write once full (every new key
// answered Degraded), an allkeys-* policy may evict the invalidation marks.

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/internal/syncbuf"
)

func TestPingWarnsOfARiskyEvictionPolicy(t *testing.T) {
	for _, tc := range []struct {
		maxmemory, policy, want string
	}{
		{"100mb", "noeviction", "noeviction"},
		{"100mb", "allkeys-lru", "allkeys-lru"},
		{"100mb", "volatile-lfu", ""},
		{"0", "noeviction", ""},
	} {
		t.Run(tc.maxmemory+"/"+tc.policy, func(t *testing.T) {
			_, clients := redistest.Independent(t, 1) // a server of its own: CONFIG SET touches no other test
			rdb := clients[0]
			ctx := t.Context()
			if err := rdb.ConfigSet(ctx, "maxmemory", tc.maxmemory).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ConfigSet(ctx, "maxmemory-policy", tc.policy).Err(); err != nil {
				t.Fatal(err)
			}
			var logs syncbuf.Buffer
			c, err := cache.New[string](rdb, cache.Options{Namespace: redistest.Prefix(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			for range 2 {
				if err := c.Ping(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got := logs.String()
			switch {
			case tc.want == "" && strings.Contains(got, "eviction policy"):
				t.Fatalf("warned of a safe setting:\n%s", got)
			case tc.want != "" && strings.Count(got, "eviction policy") != 1:
				t.Fatalf("want one warning naming %s, got:\n%s", tc.want, got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("the warning does not name %s:\n%s", tc.want, got)
			}
		})
	}
}
