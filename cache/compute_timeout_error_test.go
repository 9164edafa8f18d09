package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A compute that honours its context returns its deadline's error when
// ComputeTimeout ends it: its callers, whose own contexts are alive, get an
// error matching ErrComputeTimeout (and context.DeadlineExceeded, as
// before), never a bare context.DeadlineExceeded that reads as their own
// deadline. The robustness suite's context-errors property found the bare
// one (seed 1796543617079454509, redis-busy); TestComputeTimeoutReleasesCallers
// covers a compute that ignores its context.
func TestComputeTimeoutOfAContextAwareComputeIsNamed(t *testing.T) {
	for _, local := range []bool{false, true} {
		t.Run(fmt.Sprintf("local=%v", local), func(t *testing.T) {
			opts := cache.Options{Namespace: redistest.Prefix(t), ComputeTimeout: 5 * time.Millisecond, WaitTimeout: time.Second}
			var c *cache.Cache[string]
			if local {
				c = newCache[string](t, nil, opts)
			} else {
				c = replicas[string](t, 1, opts)[0]
			}
			honours := func(ctx context.Context) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			}
			ctx := bounded(t, 30*time.Second)
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, cache.ErrComputeTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v; want ErrComputeTimeout, matching context.DeadlineExceeded", what, err)
				}
			}
			// Whether fn's own return or the deadline reaches the compute
			// first is a race (the old code lost about one in 60): 100 rounds see both.
			for i := range 100 {
				_, err := c.GetOrCompute(ctx, fmt.Sprint("k", i), honours)
				check("GetOrCompute", err)
				_, err = c.Fetch(ctx, fmt.Sprint("f", i), honours)
				check("Fetch", err)
				_, err = c.GetOrComputeMany(ctx, []string{fmt.Sprint("b", i)}, func(ctx context.Context, _ []string) (map[string]string, error) {
					<-ctx.Done()
					return nil, ctx.Err()
				})
				check("GetOrComputeMany", err)
			}
			if ctx.Err() != nil {
				t.Fatal("the callers' context ended: the test proves nothing")
			}
		})
	}
}
