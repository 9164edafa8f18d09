package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A claim or a fill whose reply does not come within its budget fails as
// its step: the error its caller gets, and the one the Failed hook is told
// (once), match the budget's ErrRedisTimeout, which Run has judged (an
// outage, or load when Redis answers other steps), never a command's raw
// i/o timeout that no budget judged.
//
// A client that honours deadlines (ContextTimeoutEnabled) runs a step
// whose context cannot be cancelled (a singleflight leader's claim and
// fill) inline, cut on the socket at its budget: go-redis hands the
// timeout to each command of the step, and the step used to return no
// error of its own. Run then took the cut for a reply and the caller's
// failure for an outage, whatever Redis answered meanwhile: a fleet on a
// loaded machine saw callers computing locally while Redis merely slowed.
func TestClaimOrFillCutAtItsBudgetFailsAsTheStep(t *testing.T) {
	for _, step := range []string{"claim", "fill", "fill pipeline"} {
		t.Run(step, func(t *testing.T) {
			p, err := faultproxy.New(redistest.Addr(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			errTimeout := errors.New("test: past the budget")
			ns := redistest.Prefix(t)
			r := &reports{}
			s := storeOn(t, rdb, ns, r, func(string, func(context.Context)) {}, func(c *Config) {
				c.RedisTimeout, c.ErrRedisTimeout = 100*time.Millisecond, errTimeout
			})
			ctx := context.Background() // cannot be cancelled: the step runs inline
			k := rediskey.For(ns, "k")
			var token string
			s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, c Claimed) {
				if c.Err != nil || !c.Won {
					t.Fatalf("claim before the hold: %+v", c)
				}
				token = c.Token
			})
			if step == "claim" {
				k = rediskey.For(ns, "other")
			}
			p.SetHold(true) // nothing arrives until the end of the test
			t.Cleanup(func() { p.SetHold(false) })
			before := len(r.failedErrs)
			var got error
			switch step {
			case "claim":
				s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, c Claimed) { got = c.Err })
			case "fill":
				s.FillMany(ctx, []Fill{{K: k, Token: token, Envelope: []byte("v"), KeepMillis: 60_000}}, func(_ int, f Filled) {
					if !f.Failed {
						got = errors.New("the fill did not fail")
					}
				})
			case "fill pipeline":
				// Two fills, one with nothing to store: skipped, no command
				// is sent for it, and each is not called for it.
				skipped := rediskey.For(ns, "skipped")
				s.FillMany(ctx, []Fill{{K: skipped}, {K: k, Token: token, Envelope: []byte("v"), KeepMillis: 60_000}}, func(i int, f Filled) {
					if i != 1 || !f.Failed {
						got = fmt.Errorf("fill %d: %+v, want only fill 1, failed", i, f)
					}
				})
			}
			if step == "claim" && !errors.Is(got, errTimeout) {
				t.Errorf("the claim's error %v: want one matching the budget's ErrRedisTimeout", got)
			}
			if step != "claim" && got != nil {
				t.Error(got)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			told := r.failedErrs[before:]
			if len(told) != 1 || !errors.Is(told[0], errTimeout) {
				t.Errorf("Failed was told %v: want one error matching the budget's ErrRedisTimeout", told)
			}
		})
	}
}
