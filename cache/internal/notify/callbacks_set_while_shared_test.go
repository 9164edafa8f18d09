package notify

// A share's OnReset and OnListening are set by its cache after New made it
// a member of its client's hub, whose receiver may already run for the
// other shares: a break then reads them from the receiver.

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Under -race: the write of b.OnReset (as cache.New does it, after
// redisstore.New made the share) and the receiver's read of it in
// runResets, after a break of a's connection, are unordered.
func TestSettingOnResetOfANewShareWhileTheHubResets(t *testing.T) {
	rdb := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := newNotifier(rdb)
	defer a.Close()
	if err := a.Listen(ctx, redistest.Prefix(t)+":a", func(string) {}); err != nil {
		t.Fatal(err)
	}
	b := newNotifier(rdb) // a member now
	defer b.Close()
	session := a.Session()
	killPubSub(redistest.Addr(t))()
	b.OnReset = func() {} // what cache.New does next
	waitFor(t, "the break seen", func() bool { return a.Session() != session })
}
