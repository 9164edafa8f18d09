package cache_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Issue 27 (misconfiguration said once and clearly): Ping answers nil
// against a real Redis and in process-local mode; against a closed port it
// fails within the budget with an error matching ErrUnavailable that names
// the namespace, the address and the cause. New itself does not dial.
func TestPingNamesTheAddressAndTheCause(t *testing.T) {
	ctx := context.Background()
	t.Run("redis", func(t *testing.T) {
		c := newCache[string](t, redistest.Client(t), cache.Options{})
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("local", func(t *testing.T) {
		c := newCache[string](t, nil, cache.Options{})
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("closed port", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		start := time.Now()
		c := newCache[string](t, rdb, cache.Options{Namespace: "wrong-addr", RedisTimeout: 200 * time.Millisecond})
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("New took %s: it must not dial", took)
		}
		start = time.Now()
		err := c.Ping(ctx)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("Ping took %s, past its budget", took)
		}
		if !errors.Is(err, cache.ErrUnavailable) {
			t.Fatalf("Ping: %v, want ErrUnavailable", err)
		}
		for _, want := range []string{"127.0.0.1:1", `"wrong-addr"`, "refused"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Ping: %q does not name %s", err, want)
			}
		}
		var nilCtx context.Context
		if err := c.Ping(nilCtx); !errors.Is(err, cache.ErrNilContext) {
			t.Errorf("Ping(nil): %v, want ErrNilContext", err)
		}
	})
}

// The breaker's log line names the namespace, the address and the cause,
// and carries no empty key.
func TestBreakerLogNamesNamespaceAndCause(t *testing.T) {
	var logs syncBuf
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newCache[string](t, rdb, cache.Options{
		Namespace:        "wrong-addr",
		BreakerThreshold: 2,
		Logger:           slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx := context.Background()
	for i := 0; i < 10 && !strings.Contains(logs.String(), "breaker open"); i++ {
		if _, err := c.GetOrCompute(ctx, "k", func(context.Context) (string, error) { return "v", nil }); err != nil {
			t.Fatal(err)
		}
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "breaker open") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no breaker line in %q", logs.String())
	}
	for _, want := range []string{"namespace=wrong-addr", "addr=127.0.0.1:1", "error=", "refused"} {
		if !strings.Contains(line, want) {
			t.Errorf("breaker line %q lacks %s", line, want)
		}
	}
	if strings.Contains(line, "key=") {
		t.Errorf("breaker line %q carries a key", line)
	}
}
