package localstore

import (
	"testing"
	"time"
)

func newStore() (*Store[string], *time.Time) {
	now := time.Unix(1000, 0)
	return New[string](100, 0, func() time.Time { return now }), &now
}

func far(now time.Time) int64 { return now.Add(time.Hour).UnixNano() }

// TestFillStoresOnlyUnderItsClaim pins the leases' fence: a claim is won
// once, a fill under it stores and releases it, and a fill under a claim
// that Set, Delete or Expire took away is fenced out.
func TestFillStoresOnlyUnderItsClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taker func(s *Store[string], now time.Time)
		want  string // the entry after the fenced fill; "" = none
	}{
		{"Set", func(s *Store[string], now time.Time) { s.Set("k", "set", 0, far(now)) }, "set"},
		{"Delete", func(s *Store[string], _ time.Time) { s.Delete("k") }, ""},
		{"Expire", func(s *Store[string], _ time.Time) {
			s.Expire("k", func(e string, _ time.Time) (string, int64, int64, bool) { return e, 0, 0, false })
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, now := newStore()
			c := s.Claim([]string{"k", "k"})
			if !c[0].Won || c[1].Won {
				t.Fatalf("claims of one key in one call: %+v, want the first won only", c)
			}
			tc.taker(s, *now)
			if s.Fill("k", c[0].Token, "computed", 0, far(*now)) {
				t.Fatalf("a fill after %s stored", tc.name)
			}
			got, ok := s.Get("k")
			if (tc.want != "") != ok || got != tc.want {
				t.Fatalf("after the fenced fill: %q, %v; want %q", got, ok, tc.want)
			}
			// The claim was taken away: the key can be claimed again.
			if again := s.Claim([]string{"k"}); !again[0].Won {
				t.Fatalf("claim after %s: not won", tc.name)
			}
		})
	}

	s, now := newStore()
	c := s.Claim([]string{"k"})
	if !s.Fill("k", c[0].Token, "v", 0, far(*now)) {
		t.Fatal("a fill under its claim was fenced out")
	}
	if got, ok := s.Get("k"); !ok || got != "v" {
		t.Fatalf("Get = %q, %v after the fill", got, ok)
	}
	if s.Fill("k", c[0].Token, "again", 0, far(*now)) {
		t.Fatal("a second fill under a released claim stored")
	}
}

// TestAbandonReleasesOnlyItsOwnClaim pins that an abandon under a stale
// token leaves the current holder's claim in place.
func TestAbandonReleasesOnlyItsOwnClaim(t *testing.T) {
	s, now := newStore()
	first := s.Claim([]string{"k"})[0]
	s.Delete("k") // takes first's claim away
	second := s.Claim([]string{"k"})[0]
	if !second.Won {
		t.Fatal("claim after Delete: not won")
	}
	s.Abandon("k", first.Token)
	if c := s.Claim([]string{"k"})[0]; c.Won {
		t.Fatal("a stale abandon released the holder's claim")
	}
	if !s.Fill("k", second.Token, "v", 0, far(*now)) {
		t.Fatal("the holder's fill was fenced out by a stale abandon")
	}
}

// TestWaitersAreWokenByEveryChange pins that each change of a key wakes its
// waiters and no other key's, and that a closed waiter is forgotten.
func TestWaitersAreWokenByEveryChange(t *testing.T) {
	s, now := newStore()
	changes := map[string]func(){
		"Fill": func() {
			c := s.Claim([]string{"k"})[0]
			s.Fill("k", c.Token, "v", 0, far(*now))
		},
		"Abandon": func() { s.Abandon("k", s.Claim([]string{"k"})[0].Token) },
		"Set":     func() { s.Set("k", "v", 0, far(*now)) },
		"Delete":  func() { s.Delete("k") },
		"Expire": func() {
			s.Expire("k", func(e string, _ time.Time) (string, int64, int64, bool) { return e, 0, 0, false })
		},
	}
	for name, change := range changes {
		w, other := s.Subscribe("k"), s.Subscribe("other")
		change()
		select {
		case <-w.Ready():
		default:
			t.Errorf("%s did not wake the key's waiter", name)
		}
		select {
		case <-other.Ready():
			t.Errorf("%s woke another key's waiter", name)
		default:
		}
		w.Close()
		other.Close()
	}
	if n := len(s.waiters); n != 0 {
		t.Fatalf("%d keys keep waiters after every waiter closed", n)
	}
}

// TestExpireRewritesUnderTheLock pins Expire's two outcomes and that its
// entries expire on the store's clock.
func TestExpireRewritesUnderTheLock(t *testing.T) {
	s, now := newStore()
	s.Set("k", "v", 0, far(*now))
	s.Expire("k", func(e string, at time.Time) (string, int64, int64, bool) {
		return e + "-expired", 0, at.Add(time.Second).UnixNano(), true
	})
	if got, ok := s.Get("k"); !ok || got != "v-expired" {
		t.Fatalf("Get = %q, %v after Expire kept the entry", got, ok)
	}
	*now = now.Add(2 * time.Second)
	if got, ok := s.Get("k"); ok {
		t.Fatalf("Get = %q past the expiry Expire gave", got)
	}
	s.Sweep()
	if n := s.Len(); n != 0 {
		t.Fatalf("Len = %d after Sweep past every expiry", n)
	}
	called := false
	s.Expire("missing", func(e string, _ time.Time) (string, int64, int64, bool) { called = true; return e, 0, 0, true })
	if called {
		t.Fatal("Expire handed a missing key's zero entry to end")
	}
}

// TestGenIsTheClaimsStamp pins that a claim, won or not, carries the
// counter Invalidate raised last.
func TestGenIsTheClaimsStamp(t *testing.T) {
	s, _ := newStore()
	if g := s.Invalidate(); g != 1 || s.Gen() != 1 {
		t.Fatalf("Invalidate = %d, Gen = %d; want 1, 1", g, s.Gen())
	}
	c := s.Claim([]string{"k", "k"})
	if c[0].Gen != 1 || c[1].Gen != 1 {
		t.Fatalf("claims carry %d and %d, want 1", c[0].Gen, c[1].Gen)
	}
}
