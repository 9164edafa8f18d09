package rediskey

import "testing"

// TestNamesAreTheStoredFormat pins every name byte for byte: replicas of
// different versions share them, so a change here is a change of the
// stored format. Namespaces and keys go in as they are, bytes that are not
// UTF-8 and braces included.
func TestNamesAreTheStoredFormat(t *testing.T) {
	for _, c := range []struct{ ns, key, value, lease, channel string }{
		{"shop", "user:1", "{shop:user:1}:v", "{shop:user:1}:l", "{shop:user:1}:n"},
		{"\xc3", "k", "{\xc3:k}:v", "{\xc3:k}:l", "{\xc3:k}:n"},
		{"a}b", "{x}", "{a}b:{x}}:v", "{a}b:{x}}:l", "{a}b:{x}}:n"},
		{"ns", "", "{ns:}:v", "{ns:}:l", "{ns:}:n"},
	} {
		n := For(c.ns, c.key)
		if n.Key != c.key || n.Value != c.value || n.Lease() != c.lease || n.Channel() != c.channel {
			t.Errorf("For(%q, %q) = %q %q %q %q; want %q %q %q %q", c.ns, c.key,
				n.Key, n.Value, n.Lease(), n.Channel(), c.key, c.value, c.lease, c.channel)
		}
		if tag := "{" + c.ns + ":" + c.key + "}"; n.Tag() != tag {
			t.Errorf("For(%q, %q).Tag() = %q, want %q", c.ns, c.key, n.Tag(), tag)
		}
	}
	if got := Inv("shop"); got != "{shop}:inv" {
		t.Errorf("Inv = %q", got)
	}
	if got := Mark("shop", "t1"); got != "{shop:t1}:t" {
		t.Errorf("Mark = %q", got)
	}
	if got := Mark("shop", ""); got != Inv("shop") {
		t.Errorf(`Mark(ns, "") = %q, want Inv`, got)
	}
	if h := Hit("k"); h.Key != "k" || h.Value != "" {
		t.Errorf("Hit = %+v", h)
	}
}

// TestForManyIsForEach pins that the batch's names, built in one string,
// are For's.
func TestForManyIsForEach(t *testing.T) {
	keys := []string{"a", "", "long:key:with:colons", "\xff"}
	got := ForMany("ns", keys)
	if len(got) != len(keys) {
		t.Fatalf("ForMany gave %d names for %d keys", len(got), len(keys))
	}
	for i, k := range keys {
		if got[i] != For("ns", k) {
			t.Errorf("ForMany[%d] = %+v, want %+v", i, got[i], For("ns", k))
		}
	}
	if len(ForMany("ns", nil)) != 0 {
		t.Error("ForMany(nil) is not empty")
	}
}
