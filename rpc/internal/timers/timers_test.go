package timers

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNotEarly: a timer never fires before its duration has passed.
func TestNotEarly(t *testing.T) {
	var s Scheduler
	for _, d := range []time.Duration{0, time.Millisecond, 7 * time.Millisecond, 40 * time.Millisecond} {
		start := time.Now()
		fired := make(chan time.Time, 1)
		s.AfterFunc(d, func() { fired <- time.Now() })
		if at := <-fired; at.Sub(start) < d {
			t.Errorf("a %v timer fired after %v", d, at.Sub(start))
		}
	}
}

// TestManyTimersOneGoroutine: a thousand armed timers run on one goroutine,
// each fires once, and the goroutine is gone when none is armed.
func TestManyTimersOneGoroutine(t *testing.T) {
	var s Scheduler
	const n = 1000
	var wg sync.WaitGroup
	var fired atomic.Int64
	running, release := make(chan struct{}), make(chan struct{})
	// Another test's scheduler may still be on its way out: that only
	// lowers the count.
	before := runtime.NumGoroutine()
	wg.Add(n)
	for i := range n {
		// Spread over 20 ms, so some share a grid point and some not.
		s.AfterFunc(time.Duration(i%20)*time.Millisecond, func() {
			if fired.Add(1) == 1 {
				close(running)
				<-release // hold the goroutine while the others are counted
			}
			wg.Done()
		})
	}
	<-running
	if d := runtime.NumGoroutine() - before; d > 1 {
		t.Errorf("%d timers armed added %d goroutines, want 1", n, d)
	}
	close(release)
	wg.Wait()
	if f := fired.Load(); f != n {
		t.Fatalf("%d timers fired, want %d", f, n)
	}
	if w := s.Wakes(); w > n/2 {
		t.Errorf("%d wake-ups for %d timers on 20 grid points: timers due together are not run together", w, n)
	}
}

// TestStopForGood: a stopped timer does not fire, and a Reset after Stop
// (a callback racing with its owner's close) does not arm it again.
func TestStopForGood(t *testing.T) {
	var s Scheduler
	var fired atomic.Bool
	tm := s.AfterFunc(time.Hour, func() { fired.Store(true) })
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported it not armed")
	}
	if tm.Reset(0) {
		t.Fatal("Reset after Stop reported the timer armed")
	}
	// A timer after it, due at once: when it has fired, the stopped one
	// would have too.
	done := make(chan struct{})
	s.AfterFunc(0, func() { close(done) })
	<-done
	if fired.Load() {
		t.Fatal("a stopped timer fired")
	}
}

// TestResetFromCallback: a callback re-arming its own timer (a ticker)
// keeps firing until stopped from outside.
func TestResetFromCallback(t *testing.T) {
	var s Scheduler
	var n atomic.Int64
	ten := make(chan struct{})
	var tm *Timer
	var mu sync.Mutex
	mu.Lock()
	tm = s.AfterFunc(time.Millisecond, func() {
		mu.Lock()
		defer mu.Unlock()
		if n.Add(1) == 10 {
			close(ten)
		}
		tm.Reset(time.Millisecond)
	})
	mu.Unlock()
	<-ten
	tm.Stop()
}

// TestEarlierTimerWakes: a timer armed while the goroutine sleeps towards a
// later one fires first.
func TestEarlierTimerWakes(t *testing.T) {
	var s Scheduler
	late := s.AfterFunc(time.Hour, func() { t.Error("the hour timer fired") })
	done := make(chan struct{})
	s.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	late.Stop()
}

func TestGrain(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want time.Duration
	}{
		{0, time.Millisecond},
		{31 * time.Millisecond, time.Millisecond},
		{64 * time.Millisecond, 2 * time.Millisecond},
		{time.Second, 16 * time.Millisecond},
		{30 * time.Second, 512 * time.Millisecond},
		{time.Hour, 1024 * time.Millisecond},
	} {
		if g := time.Duration(grain(c.d)); g != c.want {
			t.Errorf("grain(%v) = %v, want %v", c.d, g, c.want)
		}
	}
}
