package cache

import (
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache/internal/notify"
)

// notifier is the pub/sub of a Redis-backed Cache: it subscribes a key's
// fill channel while local callers wait on the key, and runs L1's
// invalidation channel (see cache/internal/notify).
type notifier = notify.Notifier

// newNotifier returns the notifier of a Cache on rdb; once the Cache is
// closed, a subscription answers [ErrClosed].
func newNotifier(rdb redis.UniversalClient) *notifier { return notify.New(rdb, ErrClosed) }

// redisSubscription is a waiter's registration on a key's channel in the
// notifier, seen through the [subscription] seam. It holds one pointer, so
// it goes into the interface without an allocation.
type redisSubscription struct{ *notify.Waiter }

// ready implements [subscription].
func (s redisSubscription) ready() <-chan struct{} { return s.C }

// close implements [subscription]: the channel is unsubscribed once it has
// no waiters left.
func (s redisSubscription) close() { s.Close() }
