package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

// A value key of another Redis type (a hash, say) is a foreign entry on
// every path — the hit path's GET, the claim script's re-read, a batch's
// MGET — never an error: the fill overwrites it.
func TestForeignTypeValueKeyIsOverwritten(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Prefix(t)
	rdb := redistest.Client(t)
	c := newCache[string](t, redistest.Client(t), cache.Options{Namespace: ns})
	for _, k := range []string{"one", "b1", "b2"} {
		if err := rdb.HSet(ctx, "{"+ns+":"+k+"}:v", "field", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.Fetch(ctx, "one", func(context.Context) (string, error) { return "v", nil })
	if err != nil || r.Outcome != cache.Miss || r.Value != "v" {
		t.Fatalf("%+v %v", r, err)
	}
	got, err := c.GetOrComputeMany(ctx, []string{"b1", "b2"}, func(_ context.Context, ks []string) (map[string]string, error) {
		return map[string]string{"b1": "v1", "b2": "v2"}, nil
	})
	if err != nil || got["b1"] != "v1" || got["b2"] != "v2" {
		t.Fatalf("%v %v", got, err)
	}
	for k, want := range map[string]string{"one": "v", "b1": "v1", "b2": "v2"} {
		if v, found, err := c.Get(ctx, k); err != nil || !found || v != want {
			t.Fatalf("%s: %q %v %v: the fill did not overwrite the foreign key", k, v, found, err)
		}
	}
}

// Issue 14, defect 7: a value key holding another Redis type (WRONGTYPE) is
// a foreign entry: GetOrCompute and GetOrComputeMany compute and overwrite
// it, Get reports it not found, Stats().Corrupt counts it, RedisErrors
// stays 0 and the breaker (threshold 2, over 16 such keys) stays closed, so
// a healthy key of the namespace is still a Redis hit.
func TestWrongTypeKeyIsForeignNotAFailure(t *testing.T) {
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
type sameShapeProduct struct {
	ID   int
	Name string
}

type sameShapeUser struct {
	ID   int
	Name string
}

// Issue 14, defect 9 (types): caches of different value types on one
// namespace never decode each other's entries: such an entry is counted in
// Corrupt, recomputed and overwritten; Get does not find it.
func TestValueTypesSharingANamespaceDoNotDecodeEachOther(t *testing.T) {
	ns := redistest.Prefix(t)
	// L1 off: every read below goes to Redis, where what is pinned happens
	// (with L1, a cache's own Set would answer its Get until the other
	// cache's overwrite is announced).
	opts := cache.Options{Namespace: ns, TTL: time.Hour, L1Size: -1}
	products := newCache[sameShapeProduct](t, redistest.Client(t), opts)
	users := newCache[sameShapeUser](t, redistest.Client(t), opts)
	strs := newCache[string](t, redistest.Client(t), opts)
	ctx := bounded(t, 20*time.Second)

	if err := products.Set(ctx, "1", sameShapeProduct{1, "chair"}); err != nil {
		t.Fatal(err)
	}
	if u, found, err := users.Get(ctx, "1"); err != nil || found {
		t.Fatalf("Cache[User].Get of a Product entry: %+v found=%v err=%v", u, found, err)
	}
	if s, found, err := strs.Get(ctx, "1"); err != nil || found {
		t.Fatalf("Cache[string].Get of a Product entry: %q found=%v err=%v", s, found, err)
	}
	uo := &origin[sameShapeUser]{value: sameShapeUser{1, "ann"}}
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
	po := &origin[sameShapeProduct]{value: sameShapeProduct{2, "desk"}}
	got, err := products.GetOrComputeMany(ctx, []string{"1"}, func(context.Context, []string) (map[string]sameShapeProduct, error) {
		po.calls.Add(1)
		return map[string]sameShapeProduct{"1": po.value}, nil
	})
	if err != nil || got["1"] != po.value || po.calls.Load() != 1 {
		t.Fatalf("Cache[Product].GetOrComputeMany over a string entry: %v, %v, %d computes", got, err, po.calls.Load())
	}
	if products.Stats().Corrupt == 0 {
		t.Fatalf("Cache[Product] counted no foreign entry: %+v", products.Stats())
	}
}
