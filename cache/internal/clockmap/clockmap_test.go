package clockmap

import (
	"strconv"
	"testing"
)

// TestBoundAndExpiry pins that a Map holds at most its bound (one ring per
// shard) and that Get and Sweep honour each entry's expiry.
func TestBoundAndExpiry(t *testing.T) {
	m := New[int](64)
	for i := range 1000 {
		m.Put(strconv.Itoa(i), i, 100)
	}
	if n := m.Len(); n > 64 {
		t.Fatalf("Len = %d after 1000 puts, want <= 64", n)
	}
	m.Put("k", 7, 100)
	if v, ok := m.Get("k", 99); !ok || v != 7 {
		t.Fatalf("Get before expiry = %d, %v; want 7, true", v, ok)
	}
	if _, ok := m.Get("k", 100); ok {
		t.Fatal("Get at expiry found the entry")
	}
	m.Sweep(100)
	if n := m.Len(); n != 0 {
		t.Fatalf("Len = %d after sweeping everything expired, want 0", n)
	}
}

// TestUpdateSeesTrace pins what Update shows decide and does with its
// answer: a tombstone is invisible to Get but its trace is live for the
// next Update; Remove drops it; Skip leaves the key as it is.
func TestUpdateSeesTrace(t *testing.T) {
	m := New[string](16)
	var seen []Trace
	update := func(v string, op Op, tr Trace) {
		m.Update("k", 10, v, 0, 100, func(old Trace, live bool) (Op, Trace) {
			if live {
				seen = append(seen, old)
			}
			return op, tr
		}, func(string) { t.Fatal("evicted with room to spare") })
	}
	update("a", StoreTombstone, Trace{Tick: 1, Digest: 5})
	if _, ok := m.Get("k", 10); ok {
		t.Fatal("Get found a tombstone")
	}
	update("b", Skip, Trace{})
	update("c", Store, Trace{Tick: 2, Digest: 6})
	if v, ok := m.Get("k", 10); !ok || v != "c" {
		t.Fatalf("Get = %q, %v; want c, true", v, ok)
	}
	update("d", Remove, Trace{})
	update("e", Skip, Trace{})
	want := []Trace{{Tick: 1, Digest: 5}, {Tick: 1, Digest: 5}, {Tick: 2, Digest: 6}}
	if len(seen) != len(want) {
		t.Fatalf("decide saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("decide saw %v, want %v", seen, want)
		}
	}
}

// TestUpdateReportsEviction pins that a store into a full shard evicts
// and names the key it evicted.
func TestUpdateReportsEviction(t *testing.T) {
	m := New[int](1) // one entry per shard
	var evicted []string
	for i := range 100 {
		m.Update(strconv.Itoa(i), 0, i, 0, 100, func(Trace, bool) (Op, Trace) { return Store, Trace{} },
			func(k string) { evicted = append(evicted, k) })
	}
	if got := 100 - len(evicted); got != m.Len() {
		t.Fatalf("%d stores, %d evictions reported, Len = %d", 100, len(evicted), m.Len())
	}
	for _, k := range evicted {
		if _, ok := m.Get(k, 0); ok {
			t.Fatalf("evicted key %q still found", k)
		}
	}
}

// TestWeightedBound pins the cost bound: the costs held stay within it
// however the puts come, each eviction is reported, an entry over a
// shard's share is not stored (and drops its key's old entry), and a
// replacement is weighed at its new cost.
func TestWeightedBound(t *testing.T) {
	const maxCost = 16 * 1000 // 1,000 per shard
	m := NewWeighted[int](1<<20, maxCost)
	store := func(k string, cost int64, evicted func(string)) {
		m.Update(k, 0, 1, cost, 100, func(Trace, bool) (Op, Trace) { return Store, Trace{} }, evicted)
	}
	held := map[string]bool{}
	for i := range 5000 {
		k := strconv.Itoa(i)
		held[k] = true
		store(k, int64(1+i%300), func(e string) {
			if !held[e] {
				t.Fatalf("eviction of %q reported twice or for a key never stored", e)
			}
			delete(held, e)
		})
		if c := m.Cost(); c > maxCost {
			t.Fatalf("after %d puts the map holds cost %d, over its bound %d", i+1, c, maxCost)
		}
	}
	if len(held) != m.Len() {
		t.Fatalf("%d keys neither evicted nor missing, Len = %d", len(held), m.Len())
	}
	for k := range held {
		if _, ok := m.Get(k, 0); !ok {
			t.Fatalf("key %q, never reported evicted, is gone", k)
		}
	}

	store("big", 10, func(string) {})
	if _, ok := m.Get("big", 0); !ok {
		t.Fatal("a light entry was not stored")
	}
	store("big", 1001, func(string) {})
	if _, ok := m.Get("big", 0); ok {
		t.Fatal("an entry over a shard's share of the bound was stored, or left its key's old entry")
	}
	before := m.Cost()
	store("k", 5, func(string) {})
	store("k", 7, func(string) {})
	if got := m.Cost() - before; got > 7 {
		t.Fatalf("a replacement added %d to the cost, want at most its own 7", got)
	}
	m.Clear()
	if c := m.Cost(); c != 0 {
		t.Fatalf("cost after Clear = %d", c)
	}
}

// TestPutWeighted pins Put's weighed form (the process-local store's
// writes): it reports whether the entry was stored, Fits says beforehand,
// Cost stays within the bound however many puts come, and an entry too
// heavy for a shard drops its key's old entry.
func TestPutWeighted(t *testing.T) {
	const maxCost = 16 * 1000 // 1,000 per shard
	m := NewWeighted[int](1<<20, maxCost)
	if !m.Fits(1000) || m.Fits(1001) {
		t.Fatalf("Fits(1000) = %v, Fits(1001) = %v with 1,000 per shard", m.Fits(1000), m.Fits(1001))
	}
	for i := range 5000 {
		if !m.PutWeighted(strconv.Itoa(i), i, 300, 100) {
			t.Fatalf("put %d of cost 300 not stored", i)
		}
		if c := m.Cost(); c > maxCost {
			t.Fatalf("Cost %d > %d after put %d", c, maxCost, i)
		}
	}
	if c, n := m.Cost(), m.Len(); c != int64(n)*300 {
		t.Fatalf("Cost %d for %d entries of 300", c, n)
	}
	m.PutWeighted("k", 1, 10, 100)
	if m.PutWeighted("k", 2, 1001, 100) {
		t.Fatal("an entry over a shard's share reported stored")
	}
	if _, ok := m.Get("k", 0); ok {
		t.Fatal("the old entry of a key whose new one was too heavy is still there")
	}
	if !New[int](10).Fits(1 << 40) {
		t.Fatal("a Map without a cost bound refuses a cost")
	}
}
