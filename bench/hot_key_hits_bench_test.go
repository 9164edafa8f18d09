package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkHotKeyHits is the hits scenario in one process, for a profile of
// each implementation alone: 8 replicas (each its own client and cache),
// 800 callers (SetParallelism 400 x GOMAXPROCS 2, spread over the replicas)
// of one hot key with a request's deadline an hour away, with go-redis'
// default client options and the README's recommended ones.
//
//	go test -run XXX -bench BenchmarkHotKeyHits -cpuprofile cpu.out .
func BenchmarkHotKeyHits(b *testing.B) {
	const replicas = 8
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, opts := range []string{"default", "recommended"} {
		for _, name := range hitsNames {
			b.Run(fmt.Sprintf("client=%s/impl=%s", opts, name), func(b *testing.B) {
				env := &runEnv{origin: newOrigin(0, 256), ttl: time.Hour, prefix: redistest.Prefix(b) + "."}
				for range replicas {
					env.clients = append(env.clients, redis.NewClient(clientOptions(&redis.Options{Addr: redistest.Addr(b)}, opts)))
				}
				defer func() {
					for _, c := range env.clients {
						_ = c.Close()
					}
				}()
				var s strategy
				var err error
				switch name {
				case "raw-get":
					err = env.clients[0].Set(ctx, env.prefix+"hot", env.origin.value, time.Hour).Err()
					s = rawGetStrategy{env}
				case "go-redis-cache":
					s, err = newGoRedisCache(env)
				case "stampede-wait":
					s, err = newStampede(false, false)(env)
				}
				if err != nil {
					b.Fatal(err)
				}
				defer s.close()
				for r := range replicas {
					if _, err := s.get(ctx, r, "hot"); err != nil {
						b.Fatal(err)
					}
				}
				admin := redistest.Client(b)
				before := commandCalls(ctx, admin)
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(400)
				b.RunParallel(func(pb *testing.PB) {
					r := int(next.Add(1) % replicas)
					for pb.Next() {
						if _, err := s.get(ctx, r, "hot"); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(commandsBetween(before, commandCalls(ctx, admin)))/float64(b.N), "cmds/op")
			})
		}
	}
}
