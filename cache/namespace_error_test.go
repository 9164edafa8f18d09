package cache_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Issue 27 (small ones): a Namespace byte outside ASCII is printed as its
// escape ('\xc3'), not as the Latin-1 letter it happens to be ('Ã').
func TestNamespaceErrorPrintsTheByteEscaped(t *testing.T) {
	for ns, want := range map[string]string{
		"ünï":  `byte '\xc3' at 0`,
		"a b":  `byte ' ' at 1`,
		"a\tb": `byte '\t' at 1`,
	} {
		_, err := cache.New[string](nil, cache.Options{Namespace: ns})
		if !errors.Is(err, cache.ErrInvalidOptions) || !strings.Contains(err.Error(), want) {
			t.Errorf("Namespace %q: %v, want %s", ns, err, want)
		}
	}
}

// Issue 14, defect 9 (names): New rejects a namespace with any byte outside
// [A-Za-z0-9_.-/] with ErrInvalidOptions, never a panic; so "shop:users" is
// rejected and namespace "shop" with key "users:1" collides with nothing.
func TestNewRejectsABadNamespace(t *testing.T) {
	rdb := redistest.Client(t)
	for _, ns := range []string{"shop:users", "a{b", "a}b", "{a}", "a\nb", "a\x00b", "a b", "a\tb", "caf\xc3\xa9", "a*b", "a\\b"} {
		c, err := cache.New[string](rdb, cache.Options{Namespace: ns})
		if c != nil {
			_ = c.Close()
		}
		if !errors.Is(err, cache.ErrInvalidOptions) {
			t.Errorf("New with Namespace %q: err %v, want ErrInvalidOptions", ns, err)
		}
	}
	base := redistest.Prefix(t)
	for _, ns := range []string{base + "_shop", base + ".shop-v2/x_1", base + "AZaz09"} {
		c, err := cache.New[string](rdb, cache.Options{Namespace: ns})
		if err != nil {
			t.Errorf("New with the valid Namespace %q: %v", ns, err)
			continue
		}
		_ = c.Close()
	}
	// A key may hold ':' (and braces, unless the cache rejects them with
	// ErrInvalidKey: "reject or escape"): in namespace "shop" it is only
	// ever a key, and no two keys share an entry.
	shop := base + "shop"
	c := newCache[string](t, rdb, cache.Options{Namespace: shop, TTL: time.Hour})
	ctx := bounded(t, 10*time.Second)
	var accepted []string
	for _, k := range []string{"users:1", "users", "users:", "{users}:1", "users}:v", "users}:l", "}"} {
		err := c.Set(ctx, k, "v:"+k)
		switch {
		case err == nil:
			accepted = append(accepted, k)
		case errors.Is(err, cache.ErrInvalidKey) && strings.ContainsAny(k, "{}"):
		default:
			t.Fatalf("Set of key %q in namespace %q: %v", k, shop, err)
		}
	}
	for _, k := range accepted {
		if v, found, err := c.Get(ctx, k); err != nil || !found || v != "v:"+k {
			t.Fatalf("key %q in namespace %q: %q found=%v err=%v (keys collide)", k, shop, v, found, err)
		}
	}
	if v, found, _ := c.Get(ctx, "users:2"); found {
		t.Fatalf("key \"users:2\" found %q: keys collide", v)
	}
}
