package cache

import "github.com/stampede-go/stampede/cache/internal/notify"

// redisSubscription is a waiter's registration on a key's channel in the
// notifier (cache/internal/notify, run by internal/redisstore), seen through
// the [subscription] seam. It holds one pointer, so it goes into the
// interface without an allocation.
type redisSubscription struct{ *notify.Waiter }

// ready implements [subscription].
func (s redisSubscription) ready() <-chan struct{} { return s.C }

// close implements [subscription]: the channel is unsubscribed once it has
// no waiters left.
func (s redisSubscription) close() { s.Close() }
