package embedded_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/embedded"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redisserver"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// Whatever Open picks, the cache's scripts and pub/sub must work on it.
func exercise(t *testing.T, e *embedded.Env) {
	t.Helper()
	rdb := redis.NewClient(e.Options)
	defer rdb.Close()
	c, err := cache.New[string](rdb, cache.Options{Namespace: "embedded-test", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	r, err := c.Fetch(ctx, "k", func(context.Context) (string, error) { return "v", nil })
	if err != nil || r.Value != "v" || r.Outcome != cache.Miss {
		t.Fatalf("%s: %+v %v", e.Kind, r, err)
	}
	r, err = c.Fetch(ctx, "k", func(context.Context) (string, error) { return "x", nil })
	if err != nil || r.Outcome != cache.Hit {
		t.Fatalf("%s: %+v %v", e.Kind, r, err)
	}
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

func TestChildProcess(t *testing.T) {
	if _, err := redisserver.LookPath(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	e, err := embedded.Open(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Kind != embedded.KindChild || !e.Comparable {
		t.Fatalf("%+v", e)
	}
	exercise(t, e)
}

func TestInProcessFallbackWithoutBinary(t *testing.T) {
	e, err := embedded.Open(env(map[string]string{"REDIS_SERVER_BIN": "/nonexistent/redis-server"}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Kind != embedded.KindInProcess || e.Comparable {
		t.Fatalf("%+v", e)
	}
	exercise(t, e)
}

func TestRedisURL(t *testing.T) {
	e, err := embedded.Open(env(map[string]string{"REDIS_URL": "redis://127.0.0.1:6390/2"}))
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind != embedded.KindURL || e.Options.Addr != "127.0.0.1:6390" || e.Options.DB != 2 {
		t.Fatalf("%+v", e)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := embedded.Open(env(map[string]string{"REDIS_URL": "http://nope"})); err == nil {
		t.Fatal("bad REDIS_URL accepted")
	}
}
