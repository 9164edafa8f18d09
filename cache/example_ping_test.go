package cache_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// New does not dial Redis: check it at start-up with Ping, and put Ping
// behind the readiness probe.
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

// Expire makes one key's next call recompute, while its value stays to
// answer if that compute fails (inside the stale-if-error window).
func ExampleCache_Expire() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	c, err := cache.New[string](rdb, cache.Options{Namespace: "example", TTL: time.Minute, StaleIfError: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	// The price of product 42 changed: recompute it on the next call, but
	// keep answering the old one should the pricing service be down.
	if err := c.Expire(ctx, "price:42"); err != nil {
		log.Print(err) // matches cache.ErrUnavailable when Redis failed it
	}
}
