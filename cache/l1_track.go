package cache

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/cache/internal/notify"
	"github.com/stampede-go/stampede/cache/internal/rediskey"
)

// L1 hears of writes on each key's own channel (issue 38): a replica
// subscribes the channel of a key its L1 may hold, and only while it may,
// so that a write reaches the replicas that read the key, not the whole
// fleet. The fill, Set, Delete and Expire scripts announce every write
// there already (the waiters' channel).
//
// A key is tracked from its second read since the last sweep (the first
// only knocks: a key read once is not worth a subscription), up to twice
// L1Size keys (a key L1 evicted keeps its tracker until the sweep). Its
// subscription goes out in the background; L1 takes a put of the key only
// while the tracker is open (Redis confirmed the subscription: see
// notify's trackers) and only of a read that began after it opened, since
// opening raises the key's floor and forgets the shared GET in flight. A write published after such a read
// began reaches the replica and drops the value; a break of the connection
// drops the key until Redis confirms the resubscription. The sweep, every
// max(L1TTL, 1 s), ends the trackers of keys that L1 no longer holds and
// that no read wanted since the sweep before.

// l1DoorBits is the doorkeeper's size: a key's bit says it was read once
// since the last sweep (two keys may share a bit: one is then tracked on
// its first read).
const l1DoorBits = 1 << 16

// l1Tracks are the keys L1 may hold, each with its channel's tracker.
type l1Tracks struct {
	mu   sync.Mutex
	m    map[string]*l1Tracker
	max  int
	door [l1DoorBits / 64]atomic.Uint64
	seed maphash.Seed
	made atomic.Uint64 // names each tracker's goroutine
}

// l1Tracker is one key's subscription for L1.
type l1Tracker struct {
	open atomic.Bool // Redis confirmed it, and it has not broken since
	used atomic.Bool // a read wanted the key since the last sweep
	w    *notify.Waiter
	gone bool // untracked (under l1Tracks.mu)
}

func newL1Tracks(max int) *l1Tracks {
	return &l1Tracks{m: make(map[string]*l1Tracker), max: max, seed: maphash.MakeSeed()}
}

// knock reports whether key was read since the last sweep, and remembers
// that it was.
func (ts *l1Tracks) knock(key string) bool {
	h := maphash.String(ts.seed, key) % l1DoorBits
	word, bit := &ts.door[h/64], uint64(1)<<(h%64)
	return word.Or(bit)&bit != 0
}

// l1wanted notes a read of key that L1 did not answer: a key that has a
// tracker keeps it through the next sweep, and one without that was read
// before since the last sweep gets one, opened in the background.
func (c *Cache[V]) l1wanted(key string) {
	ts := c.tracks
	ts.mu.Lock()
	if t := ts.m[key]; t != nil {
		ts.mu.Unlock()
		t.used.Store(true)
		return
	}
	if !ts.knock(key) || len(ts.m) >= ts.max {
		ts.mu.Unlock()
		return
	}
	t := &l1Tracker{}
	t.used.Store(true)
	ts.m[key] = t
	ts.mu.Unlock()
	// A name of its own: a tracker of key made anew while the previous
	// one's goroutine still runs (a Cluster slot's lookup) must not be
	// dropped as a duplicate.
	c.goBackground("\x00track "+strconv.FormatUint(ts.made.Add(1), 36), func(ctx context.Context) { c.track(ctx, key, t) })
}

// l1open reports whether L1 may take a put of key now: its tracker is
// open (a put of a read that began before it opened is refused by the
// key's floor).
func (c *Cache[V]) l1open(key string) bool {
	ts := c.tracks
	ts.mu.Lock()
	t := ts.m[key]
	ts.mu.Unlock()
	return t != nil && t.open.Load()
}

// track subscribes key's channel for t. Its hooks run on the notifier's
// receiving goroutine; Opened and Lost with its lock held, which they do
// not need: they touch only t, L1 and the shared reads.
func (c *Cache[V]) track(ctx context.Context, key string, t *l1Tracker) {
	w, _ := c.redis.p.Notifier().Track(ctx, rediskey.For(c.opts.Namespace, key).Channel(), &notify.Track{
		// A GET of key in flight may predate a write this replica did not
		// hear (not yet subscribed, or the connection broke): reads that
		// begin from now on must not join it, nor, being newer than the
		// floor, put its reply. Forgotten before the floor rises, as in
		// heardWrite. readGroup's lock is never held across a call into
		// the notifier, so this is safe under its lock.
		Opened: func() {
			c.redis.p.Forget(key)
			c.l1.invalidate(key) // only reads that begin from now on may be put
			t.open.Store(true)
		},
		Lost: func() {
			t.open.Store(false)
			c.redis.p.Forget(key)
			c.l1.invalidate(key)
		},
		Message: func(payload string) { c.heardWrite(key, payload) },
	})
	ts := c.tracks
	ts.mu.Lock()
	gone := t.gone
	if !gone {
		t.w = w
	}
	ts.mu.Unlock()
	if gone {
		w.Close()
	}
}

// heardWrite applies an announcement on a tracked key's channel: a fill,
// Set, Delete or Expire of it (a claim abandoned or a fill rejected wrote
// nothing).
func (c *Cache[V]) heardWrite(key, payload string) {
	if payload == "abandon" || payload == "rejected" {
		return
	}
	// A GET of key in flight may predate the write: reads that start from
	// now on must not join it. Forgotten before the floor rises, as in
	// invalidated.
	c.redis.p.Forget(key)
	var keep uint64
	if isEnvelope(payload) {
		keep = c.l1.digest(payload)
	}
	c.l1.heard(key, keep, c.now())
}

// sweepTracks ends the trackers of keys that L1 does not hold and that no
// read wanted since the last sweep, and forgets the knocks.
func (c *Cache[V]) sweepTracks() {
	ts := c.tracks
	now := c.now()
	var ended []*notify.Waiter
	ts.mu.Lock()
	for key, t := range ts.m {
		if t.used.Swap(false) {
			continue
		}
		if _, ok := c.l1.get(key, now); ok {
			continue
		}
		delete(ts.m, key)
		t.gone = true
		t.open.Store(false)
		c.l1.invalidate(key)
		if t.w != nil {
			ended = append(ended, t.w)
		}
	}
	for i := range ts.door {
		ts.door[i].Store(0)
	}
	ts.mu.Unlock()
	for _, w := range ended {
		w.Close()
	}
}

// trackSweepEvery is how often the trackers are swept for an L1 whose
// entries live ttl.
func trackSweepEvery(ttl time.Duration) time.Duration {
	return min(max(ttl, time.Second), time.Minute)
}

// startTrackSweeper sweeps the trackers every trackSweepEvery until Close.
func (c *Cache[V]) startTrackSweeper() {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		t := time.NewTicker(trackSweepEvery(c.opts.L1TTL))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				c.sweepTracks()
			case <-c.bgCtx.Done():
				return
			}
		}
	}()
}

// l1Tracked is how many keys have a tracker.
func (c *Cache[V]) l1Tracked() int {
	c.tracks.mu.Lock()
	defer c.tracks.mu.Unlock()
	return len(c.tracks.m)
}
