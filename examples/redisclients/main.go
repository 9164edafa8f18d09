// Command redisclients is docs/operating.md's example: the go-redis client
// options we recommend, and the same cache over one Redis, a Redis Cluster
// or a master behind Sentinel. It fetches one product twice and prints how
// each call was answered.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// Product is what the expensive origin builds.
type Product struct {
	ID   string
	Name string
}

// docs:begin options
// newClient returns a client for the Redis at addr with the options we
// recommend (docs/operating.md says why).
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,                   // deadlines reach the socket: the hit path's read runs inline, no goroutine
		DialTimeout:           time.Second,            // a dial the budget abandoned is not retried for 5 s in the background
		ReadTimeout:           500 * time.Millisecond, // likewise for a read (default 3 s)
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            1, // the breaker, not go-redis' backoff, handles an outage
	})
}

// docs:end options

func main() {
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	clusterAddrs := flag.String("cluster", "", "comma-separated addresses of Redis Cluster nodes, instead of -redis")
	sentinelAddrs := flag.String("sentinels", "", "comma-separated Sentinel addresses, instead of -redis")
	masterName := flag.String("master", "mymaster", "the name the Sentinels know the master by")
	flag.Parse()
	ctx := context.Background()

	// docs:begin clients
	var rdb redis.UniversalClient
	switch {
	case *clusterAddrs != "":
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*clusterAddrs, ",")})
	case *sentinelAddrs != "": // a master behind Sentinel
		rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: *masterName, SentinelAddrs: strings.Split(*sentinelAddrs, ",")})
	default:
		rdb = newClient(*redisAddr)
	}
	defer rdb.Close()
	c, err := cache.New[Product](rdb, cache.Options{Namespace: "products", WaitTimeout: 10 * time.Second})
	// docs:end clients
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for range 2 {
		res, err := c.Fetch(ctx, "p1", func(ctx context.Context) (Product, error) {
			return Product{ID: "p1", Name: "kettle"}, nil // stands for a slow query
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("product", res.Value.ID, res.Value.Name+":", res.Outcome)
	}
}
