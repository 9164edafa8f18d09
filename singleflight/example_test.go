package singleflight_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/singleflight"
)

func ExampleGroup_Do() {
	g := singleflight.Group[string]{Timeout: 5 * time.Second}
	// Each caller's deadline bounds its own wait, whatever the shared call does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var origin atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			<-start
			v, _, err := g.Do(ctx, "user:1", func(ctx context.Context) (string, error) {
				origin.Add(1)
				return "Ada", nil
			})
			if err != nil || v != "Ada" {
				fmt.Println("unexpected:", v, err)
			}
		})
	}
	close(start)
	wg.Wait()
	// Calls that overlap share one origin call; calls that do not, run again.
	fmt.Println(origin.Load() >= 1 && origin.Load() <= 10)
	// Output: true
}

// Go runs a function whose panic must not take the process down, and lets
// the caller stop waiting for it: the outcome channel is buffered.
func ExampleGo() {
	done := singleflight.Go(context.Background(), func(context.Context) (int, error) {
		panic("the origin's client blew up")
	})
	select {
	case o := <-done:
		var pe *singleflight.PanicError
		fmt.Println(errors.As(o.Err, &pe), pe.Value)
	case <-time.After(time.Second):
		fmt.Println("gave up waiting")
	}
	// Output: true the origin's client blew up
}
