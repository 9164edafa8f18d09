package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Issue 14, defect 7: a value key holding another Redis type (WRONGTYPE) is
// a foreign entry: GetOrCompute and GetOrComputeMany compute and overwrite
// it, Get reports it not found, Stats().Corrupt counts it, RedisErrors
// stays 0 and the breaker (threshold 2, over 16 such keys) stays closed, so
// a healthy key of the namespace is still a Redis hit.
func TestRegressWrongTypeIsForeign(t *testing.T) {
	rdb := redistest.Client(t)
	c := newCache[string](t, rdb, cache.Options{TTL: time.Hour, BreakerThreshold: 2, BreakerCooldown: time.Minute})
	ns := c.Namespace()
	ctx := bounded(t, 20*time.Second)
	if err := c.Set(ctx, "healthy", "h"); err != nil {
		t.Fatal(err)
	}
	plant := map[string]func(string) error{
		"list": func(k string) error { return rdb.RPush(ctx, k, "x").Err() },
		"hash": func(k string) error { return rdb.HSet(ctx, k, "f", "x").Err() },
		"set":  func(k string) error { return rdb.SAdd(ctx, k, "x").Err() },
		"zset": func(k string) error { return rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "x"}).Err() },
	}
	corrupt := uint64(0)
	for typ, put := range plant {
		for _, path := range []string{"Get", "GetOrCompute", "Fetch", "GetOrComputeMany"} {
			key := typ + "-" + path
			if err := put(valueKeyOf(ns, key)); err != nil {
				t.Fatal(err)
			}
			o := &origin[string]{value: "computed"}
			switch path {
			case "Get":
				v, found, err := c.Get(ctx, key)
				if err != nil || found {
					t.Fatalf("Get over a %s: %q found=%v err=%v; want not found, no error", typ, v, found, err)
				}
				continue // Get does not overwrite
			case "GetOrCompute":
				v, err := c.GetOrCompute(ctx, key, o.fn)
				if err != nil || v != "computed" {
					t.Fatalf("GetOrCompute over a %s: %q, %v", typ, v, err)
				}
			case "Fetch":
				r, err := c.Fetch(ctx, key, o.fn)
				if err != nil || r.Value != "computed" || r.Outcome != cache.Miss {
					t.Fatalf("Fetch over a %s: %+v, %v; want a Miss", typ, r, err)
				}
			case "GetOrComputeMany":
				got, err := c.GetOrComputeMany(ctx, []string{key}, func(ctx context.Context, ks []string) (map[string]string, error) {
					o.calls.Add(1)
					return map[string]string{key: "computed"}, nil
				})
				if err != nil || got[key] != "computed" {
					t.Fatalf("GetOrComputeMany over a %s: %v, %v", typ, got, err)
				}
			}
			if o.calls.Load() != 1 {
				t.Fatalf("%s over a %s: %d computes", path, typ, o.calls.Load())
			}
			if got := rdb.Type(ctx, valueKeyOf(ns, key)).Val(); got != "string" {
				t.Fatalf("%s over a %s: the value key is still a %s: not overwritten", path, typ, got)
			}
			r, err := c.Fetch(ctx, key, o.fn)
			if err != nil || r.Value != "computed" || r.Outcome != cache.Hit || o.calls.Load() != 1 {
				t.Fatalf("%s over a %s, read again: %+v, %v, %d computes; want a Hit", path, typ, r, err, o.calls.Load())
			}
		}
		corrupt += 2 // GetOrCompute and Fetch at least (MGET cannot tell a foreign type from none)
	}
	s := c.Stats()
	if s.RedisErrors != 0 || s.BreakerOpen || s.Degraded != 0 {
		t.Fatalf("WRONGTYPE counted as Redis failures: %+v", s)
	}
	if s.Corrupt < corrupt {
		t.Fatalf("Corrupt %d, want at least %d (one per foreign key)", s.Corrupt, corrupt)
	}
	if r, err := c.Fetch(ctx, "healthy", func(context.Context) (string, error) { return "recomputed", nil }); err != nil || r.Outcome != cache.Hit || r.Value != "h" {
		t.Fatalf("a healthy key after the foreign ones: %+v, %v", r, err)
	}

	// A stampede on a foreign key: 3 replicas x 30 callers still compute it
	// once in the fleet, with no Redis error anywhere.
	if err := rdb.RPush(ctx, valueKeyOf(ns, "stormed"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	fleet := replicas[string](t, 3, cache.Options{Namespace: ns, TTL: time.Hour, BreakerThreshold: 2, BreakerCooldown: time.Minute})
	o := &origin[string]{value: "v", delay: 50 * time.Millisecond}
	if wrong, failed := storm(fleet, 30, "stormed", o.fn, "v"); wrong != 0 || failed != 0 || o.calls.Load() != 1 {
		t.Fatalf("a stampede on a WRONGTYPE key: wrong %d, errors %d, computes %d (want 1)", wrong, failed, o.calls.Load())
	}
	for i, r := range fleet {
		if s := r.Stats(); s.RedisErrors != 0 || s.BreakerOpen || s.Degraded != 0 {
			t.Fatalf("replica %d after the stampede on a WRONGTYPE key: %+v", i, s)
		}
	}
}

// Product and User have the same shape: msgpack alone decodes each as the
// other.
type regressProduct struct {
	ID   int
	Name string
}

type regressUser struct {
	ID   int
	Name string
}

// Issue 14, defect 9 (types): caches of different value types on one
// namespace never decode each other's entries: such an entry is counted in
// Corrupt, recomputed and overwritten; Get does not find it.
func TestRegressNamespaceTypesDoNotLeak(t *testing.T) {
	ns := redistest.Prefix(t)
	opts := cache.Options{Namespace: ns, TTL: time.Hour}
	products := newCache[regressProduct](t, redistest.Client(t), opts)
	users := newCache[regressUser](t, redistest.Client(t), opts)
	strs := newCache[string](t, redistest.Client(t), opts)
	ctx := bounded(t, 20*time.Second)

	if err := products.Set(ctx, "1", regressProduct{1, "chair"}); err != nil {
		t.Fatal(err)
	}
	if u, found, err := users.Get(ctx, "1"); err != nil || found {
		t.Fatalf("Cache[User].Get of a Product entry: %+v found=%v err=%v", u, found, err)
	}
	if s, found, err := strs.Get(ctx, "1"); err != nil || found {
		t.Fatalf("Cache[string].Get of a Product entry: %q found=%v err=%v", s, found, err)
	}
	uo := &origin[regressUser]{value: regressUser{1, "ann"}}
	if u, err := users.GetOrCompute(ctx, "1", uo.fn); err != nil || u != uo.value || uo.calls.Load() != 1 {
		t.Fatalf("Cache[User].GetOrCompute over a Product entry: %+v, %v, %d computes", u, err, uo.calls.Load())
	}
	if users.Stats().Corrupt == 0 || strs.Stats().Corrupt == 0 {
		t.Fatalf("foreign-type entries not counted: users %+v, strings %+v", users.Stats(), strs.Stats())
	}
	// Overwritten: the User entry now answers users, and not products.
	if r, err := users.Fetch(ctx, "1", uo.fn); err != nil || r.Outcome != cache.Hit || r.Value != uo.value {
		t.Fatalf("Cache[User] after its overwrite: %+v, %v", r, err)
	}
	if p, found, err := products.Get(ctx, "1"); err != nil || found {
		t.Fatalf("Cache[Product].Get of the User entry: %+v found=%v err=%v", p, found, err)
	}
	so := &origin[string]{value: "s"}
	if s, err := strs.GetOrCompute(ctx, "1", so.fn); err != nil || s != "s" || so.calls.Load() != 1 {
		t.Fatalf("Cache[string].GetOrCompute over a User entry: %q, %v, %d computes", s, err, so.calls.Load())
	}
	po := &origin[regressProduct]{value: regressProduct{2, "desk"}}
	got, err := products.GetOrComputeMany(ctx, []string{"1"}, func(context.Context, []string) (map[string]regressProduct, error) {
		po.calls.Add(1)
		return map[string]regressProduct{"1": po.value}, nil
	})
	if err != nil || got["1"] != po.value || po.calls.Load() != 1 {
		t.Fatalf("Cache[Product].GetOrComputeMany over a string entry: %v, %v, %d computes", got, err, po.calls.Load())
	}
	if products.Stats().Corrupt == 0 {
		t.Fatalf("Cache[Product] counted no foreign entry: %+v", products.Stats())
	}
}

// Issue 14, defect 9 (names): New rejects a namespace with any byte outside
// [A-Za-z0-9_.-/] with ErrInvalidOptions, never a panic; so "shop:users" is
// rejected and namespace "shop" with key "users:1" collides with nothing.
func TestRegressNamespaceRejected(t *testing.T) {
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
