package dialwatch

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Watch adds a [Hook] calling failed to rdb, where it sees every dial:
// rdb itself for a *redis.Client (a Sentinel's failover client included);
// for a *redis.ClusterClient or a *redis.Ring, whose own dial hooks
// go-redis never calls, each node's client: those a Ring has now (listed
// without a round trip) and every one either makes from now on. A
// Cluster's nodes made before Watch (it has run commands) cannot be
// reached without a round trip and are not watched. It reports false, and
// adds nothing, for another client type. Call it once per client.
func Watch(rdb any, failed func(error)) bool {
	h := Hook{Failed: failed}
	switch c := rdb.(type) {
	case *redis.Client:
		c.AddHook(h)
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	case *redis.Ring:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		_ = c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
			n.AddHook(h)
			return nil
		})
	default:
		return false
	}
	return true
}
