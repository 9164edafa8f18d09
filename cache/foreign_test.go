package cache_test

import (
	"context"
	"testing"

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
