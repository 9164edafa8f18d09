package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/internal/redistest"
)

type itemHidden struct {
	ID, Name string
	price    int
}

type itemNested struct {
	ID    string
	Lines []map[string]*lineHidden
}

type lineHidden struct {
	SKU string
	//lint:ignore U1000 the field the codec would drop
	qty int
}

type itemSkipped struct {
	ID string
	//lint:ignore U1000 dropped on purpose
	price int `msgpack:"-"`
	_     struct{}
	At    time.Time // encodes itself, unexported fields and all
}

// Issue 27 (one answer on every path): New refuses, in both modes, a value
// type with a field the default codec would drop, naming the type and the
// field, so that a miss (which keeps the field) and a Redis hit (which
// would not) cannot answer two values. A field tagged `msgpack:"-"`, a
// zero-size one, a type that encodes itself and Options.AllowDroppedFields
// are accepted; a custom Codec is not checked.
func TestNewRefusesTypeWhoseFieldsTheCodecDrops(t *testing.T) {
	rdb := redistest.Client(t)
	ns := redistest.Prefix(t)
	for _, mode := range []struct {
		name  string
		redis bool
	}{{"redis", true}, {"local", false}} {
		t.Run(mode.name, func(t *testing.T) {
			client := rdb
			if !mode.redis {
				client = nil
			}
			// newOf returns a New of one type with Namespace ns, closing the cache.
			newOf := func(n func(cache.Options) (interface{ Close() error }, error)) func(cache.Options) error {
				return func(o cache.Options) error {
					o.Namespace = ns
					c, err := n(o)
					if c != nil {
						_ = c.Close()
					}
					return err
				}
			}
			hidden := newOf(func(o cache.Options) (interface{ Close() error }, error) {
				c, err := cache.New[itemHidden](client, o)
				return nilIfNil(c), err
			})
			nested := newOf(func(o cache.Options) (interface{ Close() error }, error) {
				c, err := cache.New[itemNested](client, o)
				return nilIfNil(c), err
			})
			skipped := newOf(func(o cache.Options) (interface{ Close() error }, error) {
				c, err := cache.New[itemSkipped](client, o)
				return nilIfNil(c), err
			})
			for _, tc := range []struct {
				name string
				new  func(cache.Options) error
				want string
			}{
				{"top-level field", hidden, "cache_test.itemHidden has field cache_test.itemHidden.price"},
				{"through slice, map and pointer", nested, ".Lines[]{}[].qty"},
			} {
				err := tc.new(cache.Options{})
				if !errors.Is(err, cache.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: err %v, want ErrInvalidOptions naming %q", tc.name, err, tc.want)
				}
				if err := tc.new(cache.Options{AllowDroppedFields: true}); err != nil {
					t.Errorf("%s with AllowDroppedFields: %v", tc.name, err)
				}
				if err := tc.new(cache.Options{Codec: cache.S2Codec{}}); err != nil {
					t.Errorf("%s with a custom codec: %v", tc.name, err)
				}
			}
			if err := skipped(cache.Options{}); err != nil {
				t.Errorf("tagged, zero-size and self-encoding fields: %v", err)
			}
		})
	}
}

// With AllowDroppedFields the drop is the user's choice and happens where
// the codec runs: a Redis hit lacks the field the miss had.
func TestAllowDroppedFieldsDropsOnRedis(t *testing.T) {
	rdb := redistest.Client(t)
	c := newCache[itemHidden](t, rdb, cache.Options{AllowDroppedFields: true,
		L1Size: -1}) // L1 would hand out the miss's own value: the Redis hit is what is pinned
	ctx := context.Background()
	miss, err := c.GetOrCompute(ctx, "k", func(context.Context) (itemHidden, error) {
		return itemHidden{ID: "1", Name: "a", price: 5}, nil
	})
	if err != nil || miss.price != 5 {
		t.Fatalf("miss: %+v, %v", miss, err)
	}
	hit, found, err := c.Get(ctx, "k")
	if err != nil || !found || hit.ID != "1" || hit.price != 0 {
		t.Fatalf("hit: %+v, %v; want the field dropped", hit, err)
	}
}
