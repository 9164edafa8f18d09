package cache

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// The heartbeat vouches for the marks only where the subscription and the
// commands reach one server: not behind Sentinel (a failover moves the
// commands to the new master and leaves the subscription on the old one,
// which answers PINGs and hears nothing published on the new master), nor
// on a Cluster or a Ring.
func TestHeartbeatOnlyOnOneServerClients(t *testing.T) {
	cases := []struct {
		name string
		rdb  redis.UniversalClient
		want bool
	}{
		{"plain client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"Sentinel failover client", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), false},
		{"Cluster client", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"Ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
	}
	for _, c := range cases {
		t.Cleanup(func() { _ = c.rdb.Close() })
		if got := oneServer(c.rdb); got != c.want {
			t.Errorf("%s: oneServer = %v, want %v", c.name, got, c.want)
		}
	}
}
