package notify

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) {
	// The outage tests make go-redis log every failed dial; keep the output readable.
	redis.SetLogger(quietLogger{})
	redistest.Main(m)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// errClosed stands for the cache's ErrClosed: what a closed notifier answers.
var errClosed = errors.New("test: closed")

// newNotifier returns a notifier on rdb that answers errClosed once closed.
func newNotifier(rdb redis.UniversalClient) *Notifier { return New(rdb, errClosed) }
