package lease_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lease"
)

// Every option that cannot mean anything (a drift factor that is not a
// finite number in [0, 1), a negative duration or count) is refused when
// the Client, Quorum or Election is built, with an error that names it:
// never accepted to fail every later call. A DriftFactor of NaN compares
// false with every bound, and passed a check written as "< 0 || >= 1".
func TestOptionsRefuseNonFiniteAndNegativeValues(t *testing.T) {
	// Validation comes before any use of the servers: nothing listens here.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	servers := []redis.Scripter{rdb, rdb, rdb}
	quorum := func(o lease.QuorumOptions) error { _, err := lease.NewQuorum(servers, o); return err }
	client := func(o lease.Options) error { _, err := lease.New(rdb, o); return err }
	c, err := lease.New(rdb, lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	election := func(o lease.ElectionOptions) error { _, err := lease.NewElection(c, "e", o); return err }
	cases := []struct {
		name, field string
		err         error
	}{
		{"DriftFactor NaN", "DriftFactor", quorum(lease.QuorumOptions{DriftFactor: math.NaN()})},
		{"DriftFactor +Inf", "DriftFactor", quorum(lease.QuorumOptions{DriftFactor: math.Inf(1)})},
		{"DriftFactor -Inf", "DriftFactor", quorum(lease.QuorumOptions{DriftFactor: math.Inf(-1)})},
		{"DriftFactor negative", "DriftFactor", quorum(lease.QuorumOptions{DriftFactor: -0.01})},
		{"DriftFactor 1", "DriftFactor", quorum(lease.QuorumOptions{DriftFactor: 1})},
		{"ServerTimeout negative", "ServerTimeout", quorum(lease.QuorumOptions{ServerTimeout: -time.Millisecond})},
		{"quorum RedisTimeout negative", "RedisTimeout", quorum(lease.QuorumOptions{Options: lease.Options{RedisTimeout: -time.Millisecond}})},
		{"Retries negative", "Retries", client(lease.Options{Retries: -1})},
		{"RetryBase negative", "RetryBase", client(lease.Options{RetryBase: -time.Millisecond})},
		{"RetryMax negative", "RetryMax", client(lease.Options{RetryMax: -time.Millisecond})},
		{"RedisTimeout negative", "RedisTimeout", client(lease.Options{RedisTimeout: -time.Millisecond})},
		{"ExtendInterval negative", "ExtendInterval", client(lease.Options{ExtendInterval: -time.Millisecond})},
		{"MaxExtensions negative", "MaxExtensions", client(lease.Options{MaxExtensions: -1})},
		{"FenceTTL negative", "FenceTTL", client(lease.Options{FenceTTL: -time.Hour})},
		{"election TTL negative", "TTL", election(lease.ElectionOptions{TTL: -time.Second})},
		{"election RetryInterval negative", "RetryInterval", election(lease.ElectionOptions{RetryInterval: -time.Second})},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, lease.ErrInvalidOptions) || !strings.Contains(tc.err.Error(), tc.field) {
			t.Errorf("%s: err=%v, want ErrInvalidOptions naming %s", tc.name, tc.err, tc.field)
		}
	}
	// The bounds themselves, and the zero value (the default), are valid.
	for _, d := range []float64{0, 0.5, math.Nextafter(1, 0)} {
		if err := quorum(lease.QuorumOptions{DriftFactor: d}); err != nil {
			t.Errorf("DriftFactor %g: %v", d, err)
		}
	}
}
