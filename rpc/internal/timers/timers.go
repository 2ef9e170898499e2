package timers

import (
	"container/heap"
	"sync"
	"time"
)

// The least and greatest grid a deadline is rounded up to.
const (
	minGrain = time.Millisecond
	maxGrain = 1024 * time.Millisecond
)

// Scheduler runs timers on one goroutine. Its zero value is ready to use.
type Scheduler struct {
	mu      sync.Mutex
	h       timerHeap
	running bool          // the goroutine is running
	kick    chan struct{} // wakes the goroutine: the earliest deadline changed
	wakes   uint64        // times the goroutine woke, for tests
	now     func() time.Time
}

// Default is the process's scheduler.
var Default Scheduler

// Timer calls its function once it falls due. Only its Scheduler's
// goroutine runs the function, so two calls of one Timer's function never
// overlap.
type Timer struct {
	s       *Scheduler
	f       func()
	at      int64 // the deadline, Unix nanoseconds
	idx     int   // position in the heap, -1 when not armed
	stopped bool
}

// AfterFunc arranges for f to run on s's goroutine once d has passed.
func (s *Scheduler) AfterFunc(d time.Duration, f func()) *Timer {
	t := s.NewTimer(f)
	t.Reset(d)
	return t
}

// NewTimer returns a timer that runs f when it falls due, not armed yet:
// the owner can store it before Reset arms it, so f may use it.
func (s *Scheduler) NewTimer(f func()) *Timer { return &Timer{s: s, f: f, idx: -1} }

// Reset arms t again to fire once d has passed, whether or not it fired.
// It does nothing once t is stopped; it reports whether t was armed.
func (t *Timer) Reset(d time.Duration) bool {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.stopped {
		return false
	}
	armed := t.idx >= 0
	if armed {
		heap.Remove(&s.h, t.idx)
	}
	s.armLocked(t, d)
	return armed
}

// Stop stops t for good: it will not fire again, and Reset no longer arms
// it (a callback running at the time cannot arm it again). It reports
// whether t was armed. A call of t's function already under way is not
// waited for.
func (t *Timer) Stop() bool {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t.stopped = true
	if t.idx < 0 {
		return false
	}
	heap.Remove(&s.h, t.idx)
	if len(s.h) == 0 {
		s.wakeLocked() // nothing left: let the goroutine go
	}
	return true
}

// grain is the grid d's deadline is rounded up to: the greatest power of
// two of milliseconds no greater than d/32, within [minGrain, maxGrain].
// Grids are powers of two, so a coarse one's points are points of every
// finer one and timers of different durations still share wake-ups.
func grain(d time.Duration) int64 {
	g := minGrain
	for g < maxGrain && 2*g <= d/32 {
		g *= 2
	}
	return int64(g)
}

func (s *Scheduler) armLocked(t *Timer, d time.Duration) {
	if s.now == nil {
		s.now = time.Now
	}
	d = max(d, 0)
	g := grain(d)
	at := s.now().Add(d).UnixNano()
	at = (at + g - 1) / g * g
	t.at = at
	heap.Push(&s.h, t)
	if !s.running {
		s.running = true
		if s.kick == nil {
			s.kick = make(chan struct{}, 1)
		}
		go s.run()
		return
	}
	if t.idx == 0 {
		s.wakeLocked()
	}
}

func (s *Scheduler) wakeLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run fires the timers that are due, sleeps until the next one, and
// returns when none is armed.
func (s *Scheduler) run() {
	var sleep *time.Timer
	defer func() {
		if sleep != nil {
			sleep.Stop()
		}
	}()
	for {
		s.mu.Lock()
		s.wakes++
		now := s.now().UnixNano()
		for len(s.h) > 0 && s.h[0].at <= now {
			t := heap.Pop(&s.h).(*Timer)
			s.mu.Unlock()
			t.f()
			s.mu.Lock()
		}
		if len(s.h) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		wait := time.Duration(s.h[0].at - now)
		s.mu.Unlock()
		if sleep == nil {
			sleep = time.NewTimer(wait)
		} else {
			sleep.Reset(wait)
		}
		select {
		case <-sleep.C:
		case <-s.kick:
			if !sleep.Stop() {
				select { // a value sent before Stop (before Go 1.23's timers)
				case <-sleep.C:
				default:
				}
			}
		}
	}
}

// Wakes is how many times s's goroutine has woken, for tests.
func (s *Scheduler) Wakes() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wakes
}

type timerHeap []*Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*Timer)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.idx = -1
	*h = old[:len(old)-1]
	return t
}
