package cache

import (
	"context"
	"testing"

	"github.com/stampede-go/stampede/cache/internal/scripts"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A claim run again with its own token (its reply was lost on a broken
// connection, and go-redis' MaxRetries or the budget's retry ran it again) is
// won; another token still finds the lease taken.
func TestClaimRunAgainWithItsTokenIsWon(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	k := []string{redistest.Prefix(t) + "v", redistest.Prefix(t) + "l"}
	for i, tc := range []struct {
		token string
		won   int64
	}{{"mine", 1}, {"mine", 1}, {"theirs", 0}} {
		res, err := scripts.Claim.Run(ctx, rdb, k, tc.token, 10_000).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if won, _ := res[0].(int64); won != tc.won {
			t.Fatalf("claim %d by %q: %v, want won=%d", i, tc.token, res, tc.won)
		}
	}
}
