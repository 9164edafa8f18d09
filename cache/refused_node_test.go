package cache_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A Cluster or a Ring dials through a client per node, and go-redis never
// calls a dial hook added to the ClusterClient or the Ring itself: the
// cache watches each node's client, so a node that refuses connections
// costs a call no budget there either, as on a plain client
// (TestRefusedRedisCostsNoBudgetAndIsNamedAtTheFirstCall). Before, each
// call waited out its whole budget and blamed it.
func TestRefusedNodeOfAClusterOrRingCostsNoBudget(t *testing.T) {
	const budget = time.Second // far above what a refused dial may cost
	clients := []struct {
		name string
		make func(addr string) redis.UniversalClient
	}{
		{"Cluster", func(addr string) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
		}},
		{"Ring", func(addr string) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
		}},
	}
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			var obs redisErrors
			rdb := cl.make(redistest.RefusingAddr(t))
			t.Cleanup(func() { _ = rdb.Close() })
			c := newCache[string](t, rdb, cache.Options{RedisTimeout: budget, Observer: obs.observer()})
			origin := func(context.Context) (string, error) { return "v", nil }
			for i := range 3 {
				start := time.Now()
				r, err := c.Fetch(context.Background(), fmt.Sprint("k", i), origin)
				if took := time.Since(start); took > budget/4 {
					t.Errorf("call %d took %s against a refused node (budget %s): a refused dial is known at once", i, took, budget)
				}
				if err != nil || r.Outcome != cache.Degraded {
					t.Fatalf("call %d: %+v %v, want degraded", i, r, err)
				}
			}
			if errs := obs.all(); len(errs) == 0 || !strings.Contains(errs[0].Error(), "connection refused") {
				t.Errorf("the first call's Redis error event: %v, want the refused dial named", errs)
			}
		})
	}
}
