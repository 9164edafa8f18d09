package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache/internal/rediskey"
)

// heldShared starts a shared read of key whose GET Redis has answered but
// whose reply is held up until the returned release is called: its flight
// stays registered in the group. It returns once the GET is held.
func heldShared(t *testing.T, s *Store, key string) (release func()) {
	t.Helper()
	answered, hold := make(chan struct{}), make(chan struct{})
	var once, releaseOnce sync.Once
	s.getFn = func(get GetFunc) GetFunc {
		return func(ctx context.Context, k string) (Reply, error) {
			r, err := get(ctx, k)
			held := false
			once.Do(func() { held = true })
			if held {
				close(answered)
				<-hold
			}
			return r, err
		}
	}(s.getFn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Read(context.Background(), rediskey.Hit(key), Shared)
	}()
	<-answered
	if n := s.Flights(); n != 1 {
		t.Fatalf("%d flights while a shared read is held, want 1", n)
	}
	release = func() {
		releaseOnce.Do(func() { close(hold) })
		<-done
	}
	t.Cleanup(release)
	return release
}

// Every route by which the store learns of a state of the key (a write
// acknowledged, a read of its own or a waiter's, a batch read, a claim
// won, a fill stored, an Expire written) forgets the shared read in
// flight, so that a shared read that starts afterwards sends a GET of its
// own instead of joining an older one; a claim found held and a fill
// fenced out learn nothing and forget nothing.
func TestRoutesThatLearnOfAKeyForgetItsSharedRead(t *testing.T) {
	ctx := context.Background()
	routes := []struct {
		name   string
		forget bool
		run    func(t *testing.T, s *Store, k rediskey.Names)
	}{
		{"read own", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if _, err := s.Read(ctx, k, Own); err != nil {
				t.Fatal(err)
			}
		}},
		{"read waiting", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if _, err := s.Read(ctx, k, Waiting); err != nil {
				t.Fatal(err)
			}
		}},
		{"read many", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.ReadMany(ctx, []rediskey.Names{k}, func(int, Reply) {}); err != nil {
				t.Fatal(err)
			}
		}},
		{"set", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.Set(ctx, k, []byte("set"), 60_000); err != nil {
				t.Fatal(err)
			}
		}},
		{"delete", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}},
		{"expire", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.Expire(ctx, k, func(cur string) string { return cur + "-expired" }); err != nil {
				t.Fatal(err)
			}
		}},
		{"claim won", true, func(t *testing.T, s *Store, k rediskey.Names) {
			var c Claimed
			s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, got Claimed) { c = got })
			if !c.Won {
				t.Fatalf("claim: %+v", c)
			}
		}},
		{"claim held", false, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.rdb.Set(ctx, k.Lease(), "another", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			var c Claimed
			s.ClaimMany(ctx, []rediskey.Names{k}, func(_ int, got Claimed) { c = got })
			if c.Won || c.Err != nil {
				t.Fatalf("claim: %+v, want held", c)
			}
		}},
		{"fill stored", true, func(t *testing.T, s *Store, k rediskey.Names) {
			if err := s.rdb.Set(ctx, k.Lease(), "tok", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			var f Filled
			s.FillMany(ctx, []Fill{{K: k, Token: "tok", Envelope: []byte("filled"), KeepMillis: 60_000}}, func(_ int, got Filled) { f = got })
			if !f.Stored {
				t.Fatalf("fill: %+v", f)
			}
		}},
		{"fill fenced", false, func(t *testing.T, s *Store, k rediskey.Names) {
			var f Filled
			s.FillMany(ctx, []Fill{{K: k, Token: "not-held", Envelope: []byte("filled"), KeepMillis: 60_000}}, func(_ int, got Filled) { f = got })
			if f.Stored || !f.Fenced {
				t.Fatalf("fill: %+v", f)
			}
		}},
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			s, _, ns := newStore(t)
			k := rediskey.For(ns, "k")
			if err := s.Set(ctx, k, []byte("first"), 60_000); err != nil {
				t.Fatal(err)
			}
			release := heldShared(t, s, "k")
			r.run(t, s, k)
			if n, want := s.Flights(), map[bool]int{true: 0, false: 1}[r.forget]; n != want {
				t.Fatalf("%d shared reads in flight after %s, want %d", n, r.name, want)
			}
			release()
		})
	}
}
