package cache

// The counter and the marks in Redis as the seam sees them: the steps are
// internal/redisstore's (marks.go there), with no value to decode.

import (
	"context"

	"github.com/stampede-go/stampede/cache/internal/marks"
)

// readGen implements [store]: one HGET, and the counter restored past the
// marks' floor when Redis lost it.
func (s *redisStore[V]) readGen(ctx context.Context) (uint64, error) { return s.p.ReadGen(ctx) }

// readMarks implements [store]: a pipeline of HMGETs.
func (s *redisStore[V]) readMarks(ctx context.Context, tags []string) ([]marks.Mark, error) {
	return s.p.ReadMarks(ctx, tags)
}

// invalidate implements [store]: Clear's script, or the counter moved on
// and the tags' marks raised in batches with their announcements.
func (s *redisStore[V]) invalidate(ctx context.Context, tags []string, soft bool) (uint64, error) {
	return s.p.Invalidate(ctx, tags, soft)
}
