package cache_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// New does not dial Redis: check it at start-up with Ping, and put Ping
// behind the readiness probe. Expire makes one key's next call recompute
// while its value stays for stale-if-error.
func ExampleCache_Ping() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	c, err := cache.New[string](rdb, cache.Options{Namespace: "example", TTL: time.Minute})
	if err != nil {
		log.Fatal(err) // a bad option, or a value type the codec cannot store whole
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		log.Fatal(err) // names the address and the cause; matches cache.ErrUnavailable
	}
}
