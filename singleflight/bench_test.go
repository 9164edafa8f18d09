package singleflight_test

import (
	"context"
	"strconv"
	"testing"

	xsf "golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/singleflight"
)

// doer is what the benchmarks compare: x/sync's untyped Do against ours.
type doer interface {
	do(key string) (int, error)
}

type xsync struct{ g xsf.Group }

func (x *xsync) do(key string) (int, error) {
	v, err, _ := x.g.Do(key, func() (any, error) { return 1, nil })
	return v.(int), err
}

type typed struct{ g singleflight.Group[int] }

func (s *typed) do(key string) (int, error) {
	v, _, err := s.g.Do(context.Background(), key, func(context.Context) (int, error) { return 1, nil })
	return v, err
}

func BenchmarkDo(b *testing.B) {
	impls := []struct {
		name string
		new  func() doer
	}{
		{"x-sync", func() doer { return &xsync{} }},
		{"stampede", func() doer { return &typed{} }},
	}
	for _, impl := range impls {
		for _, keys := range []int{1, 1024} {
			b.Run(impl.name+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				d := impl.new()
				names := make([]string, keys)
				for i := range names {
					names[i] = "k" + strconv.Itoa(i)
				}
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						if _, err := d.do(names[i%keys]); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			})
		}
	}
}
