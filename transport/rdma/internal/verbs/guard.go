package verbs

import "sync/atomic"

// guard lets any number of short operations run at once without a lock, and
// lets a closer shut it and wait until the operations in flight have
// finished. Unlike a sync.RWMutex read lock, enter may be nested (one post
// call may name the same MR in many work requests).
//
// After shut, enter always fails; a guard is never reopened.
type guard struct {
	n        atomic.Int64  // shutBit | operations in flight
	signaled atomic.Bool   // drained has been closed
	drained  chan struct{} // closed once the guard is shut and empty
}

const shutBit = 1 << 40

func newGuard() guard { return guard{drained: make(chan struct{})} }

// enter starts an operation; false means the guard is shut (do not proceed,
// and do not call exit).
func (g *guard) enter() bool {
	if g.n.Add(1) >= shutBit {
		g.exit()
		return false
	}
	return true
}

// exit ends an operation started by a successful enter.
func (g *guard) exit() {
	if g.n.Add(-1) == shutBit {
		g.signal()
	}
}

func (g *guard) signal() {
	if g.signaled.CompareAndSwap(false, true) {
		close(g.drained)
	}
}

// shut makes every later enter fail and waits for the operations in flight.
// It must be called at most once.
func (g *guard) shut() {
	if g.n.Add(shutBit) == shutBit {
		g.signal()
	}
	<-g.drained
}

// isShut reports whether shut has been called.
func (g *guard) isShut() bool { return g.n.Load() >= shutBit }
