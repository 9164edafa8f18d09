package main

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/examples/internal/exampletest"
	"github.com/stampede-go/stampede/internal/redisserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { exampletest.Main(m, main) }

// computedThenCached is what the program prints on a Redis that has never
// seen the product: the first call computes, the second is a hit.
const computedThenCached = "product p1 kettle: miss\nproduct p1 kettle: hit\n"

// TestSameCacheOnEveryKindOfRedis runs the program against one
// redis-server, a Redis Cluster and a master behind Sentinel, and holds
// what docs/operating.md says: cache.New takes any redis.UniversalClient and
// nothing else changes — the same calls answer the same way on each.
func TestSameCacheOnEveryKindOfRedis(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		if out := exampletest.Run(t, "-redis", redistest.Addr(t)); out != computedThenCached {
			t.Errorf("the program printed\n%s\nwant\n%s", out, computedThenCached)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel() // starting the servers is mostly waiting
		c := redistest.Cluster(t)
		if out := exampletest.Run(t, "-cluster", strings.Join(c.Addrs(), ",")); out != computedThenCached {
			t.Errorf("the program printed\n%s\nwant\n%s", out, computedThenCached)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel() // starting the servers is mostly waiting
		s := redistest.NewSentinel(t)
		out := exampletest.Run(t, "-sentinels", strings.Join(s.SentinelAddrs(), ","), "-master", redisserver.SentinelMaster)
		if out != computedThenCached {
			t.Errorf("the program printed\n%s\nwant\n%s", out, computedThenCached)
		}
	})
}

// TestSilentRedisAnswersDegradedPromptly runs the program, with the
// recommended client options, against a Redis that accepts connections and
// never answers: as docs/operating.md says, the calls go on without Redis
// (Degraded) after a budget, rather than hang on the connection.
func TestSilentRedisAnswersDegradedPromptly(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel completes the handshakes
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The same run against a live Redis first: what starting and stopping
	// the process costs on this machine now.
	start := time.Now()
	exampletest.Run(t, "-redis", redistest.Addr(t))
	overhead := time.Since(start)

	start = time.Now()
	out := exampletest.Run(t, "-redis", silent.Addr().String())
	took := time.Since(start) - overhead
	if want := "product p1 kettle: degraded\nproduct p1 kettle: degraded\n"; out != want {
		t.Errorf("the program printed\n%s\nwant\n%s", out, want)
	}
	// Two calls of one budget (250 ms) each and Close's 100 ms: 0.6 s on
	// a quiet machine, with room for a loaded one. (With RedisTimeout off,
	// these options' own timeouts made it 1.1 s: the bound holds the
	// answer's promptness, not the budget's exact figure.)
	if took > 2*time.Second {
		t.Errorf("the program took %s longer against a silent Redis than against a live one", took)
	}
}

// TestFirstProgramUsesTheseOptions holds what the page says under the
// options: the README's first program builds its client with exactly these.
func TestFirstProgramUsesTheseOptions(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile("../firstprogram/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, opts, _ := strings.Cut(string(src), "Addr:                  addr,\n")
	opts, _, _ = strings.Cut(opts, "\t})\n")
	if opts == "" {
		t.Fatal("main.go: no options after Addr in newClient")
	}
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if !strings.Contains(flat(string(first)), flat(opts)) {
		t.Errorf("examples/firstprogram/main.go does not build its client with these options:\n%s", opts)
	}
}
