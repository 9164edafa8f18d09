package stale_test

import (
	"fmt"
	"time"

	"github.com/stampede-go/stampede/stale"
)

func ExamplePolicy_State() {
	p := stale.Policy{TTL: time.Minute, Stale: 10 * time.Second, StaleIfError: time.Hour}
	written := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := p.Write(written, 0, 0.5)
	for _, after := range []time.Duration{30 * time.Second, 65 * time.Second, 10 * time.Minute, 2 * time.Hour} {
		fmt.Printf("%-6s %s\n", after, p.State(w, written.Add(after), 0, 0.5))
	}
	// Output:
	// 30s    fresh
	// 1m5s   stale
	// 10m0s  expired
	// 2h0m0s gone
}
