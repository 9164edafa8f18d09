package redisstep

import (
	"sync"
	"testing"
)

// The steppers run every step handed to them, each at once: a step that
// stays busy (a silent Redis) never delays another, however many are busy;
// and a step handed over after close still runs.
func TestSteppersRunEveryStepAtOnceAndStepsAfterClose(t *testing.T) {
	p := newStepPool()
	const busy = 3 * maxIdleSteppers
	release := make(chan struct{})
	var started, finished sync.WaitGroup
	started.Add(busy)
	finished.Add(busy)
	for range busy {
		p.run(func() {
			defer finished.Done()
			started.Done()
			<-release
		})
	}
	started.Wait() // every step runs while all the others are still busy
	close(release)
	finished.Wait()
	// The steppers now idle are reused: the steps run one after another,
	// each handed to whichever stepper is free.
	for i := range 2 * busy {
		ran := make(chan int)
		p.run(func() { ran <- i })
		if got := <-ran; got != i {
			t.Fatalf("step %d ran as %d", i, got)
		}
	}
	if n := p.idle.Load(); n > maxIdleSteppers {
		t.Errorf("%d idle steppers kept, want at most %d", n, maxIdleSteppers)
	}
	p.close()
	ran := make(chan struct{})
	p.run(func() { close(ran) })
	<-ran
}

// A Budget without steppers (a zero Budget, as tests build) runs each
// step on a goroutine of its own.
func TestNilSteppersRunStepsOnGoroutinesOfTheirOwn(t *testing.T) {
	var p *stepPool
	ran := make(chan struct{})
	p.run(func() { close(ran) })
	<-ran
}
