// Package embedded picks the Redis that examples and the benchmark harness
// run against when the user gave none: $REDIS_URL when set, else a
// redis-server child process on a free loopback port when the binary exists,
// else an in-process Redis-compatible server (miniredis), saying which.
package embedded

import (
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redisserver"
)

// Kind says which Redis an [Env] runs on.
type Kind string

// The kinds of Redis an [Env] can run on.
const (
	KindURL         Kind = "REDIS_URL"
	KindChild       Kind = "redis-server child process"
	KindInProcess   Kind = "in-process miniredis"
	envRedisURLName      = "REDIS_URL"
)

// Env is a Redis to run against and how to reach it.
type Env struct {
	// Kind says which Redis this is.
	Kind Kind
	// Options connects a go-redis client to it.
	Options *redis.Options
	// Description is one line for the program's first log line.
	Description string
	// Comparable is false for the in-process server, whose figures say
	// nothing about a real Redis.
	Comparable bool

	closeFn func() error
}

// Close stops a server that Open started; it does nothing for REDIS_URL.
func (e *Env) Close() error {
	if e.closeFn == nil {
		return nil
	}
	return e.closeFn()
}

// Open returns the Redis to use. getenv is os.Getenv or a test's stand-in;
// besides REDIS_URL it reads REDIS_SERVER_BIN, the redis-server to run.
func Open(getenv func(string) string) (*Env, error) {
	if u := getenv(envRedisURLName); u != "" {
		opts, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("embedded: REDIS_URL: %w", err)
		}
		return &Env{Kind: KindURL, Options: opts, Comparable: true,
			Description: "Redis from REDIS_URL at " + opts.Addr}, nil
	}
	srv, err := redisserver.Start(redisserver.Options{Binary: getenv("REDIS_SERVER_BIN")})
	if err == nil {
		return &Env{Kind: KindChild, Options: &redis.Options{Addr: srv.Addr()}, Comparable: true,
			Description: fmt.Sprintf("embedded redis-server %s child process on %s (no REDIS_URL given)", srv.Version(), srv.Addr()),
			closeFn:     srv.Close}, nil
	}
	if !errors.Is(err, redisserver.ErrNoBinary) {
		return nil, err
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: miniredis: %w", err)
	}
	return &Env{Kind: KindInProcess, Options: &redis.Options{Addr: mr.Addr()}, Comparable: false,
		Description: "in-process miniredis on " + mr.Addr() + " (no REDIS_URL and no redis-server binary; figures are not comparable to a real Redis)",
		closeFn:     func() error { mr.Close(); return nil }}, nil
}
