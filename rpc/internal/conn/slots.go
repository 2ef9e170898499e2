package conn

import (
	"context"
	"sync"
)

// Slots is the client's side of the server's MAX_CONCURRENT_STREAMS
// (docs/wire.md, "SETTINGS"): the calls and streams a link has open, and
// the callers waiting for one of them to end. A call or stream takes a
// slot before its REQUEST or OPEN leaves and gives it back once the server
// no longer counts it either: its RESPONSE, TRAILERS or RESET arrived, or
// the CANCEL or RESET that ends it has left (link.freed). So the server
// never sees more than it allowed, and never has to refuse a call for the
// count.
//
// Waiters queue in order and a freed slot passes straight to the first of
// them, so a burst far over the limit costs one wake-up per slot, not one
// per waiter. Its lock is a leaf.
type Slots struct {
	mu      sync.Mutex
	limit   int // 0: the server set none
	active  int // slots taken, handed-over ones included
	waiters []*slotWaiter
	closed  bool // the link takes no new calls: waiters give up
}

type slotWaiter struct {
	ready chan bool // capacity 1: true, the slot is its; false, the link closed
}

// SetLimit sets the server's limit; waiters that now fit take their slots.
func (s *Slots) SetLimit(n int) {
	s.mu.Lock()
	s.limit = n
	for len(s.waiters) > 0 && (s.limit == 0 || s.active < s.limit) {
		s.active++
		s.pop().ready <- true
	}
	s.mu.Unlock()
}

// Acquire takes a slot, waiting for one within ctx. It reports false when
// the link stopped taking calls (GOAWAY, or closed): the caller goes to
// another link. Its error is ctx's.
func (s *Slots) Acquire(ctx context.Context) (bool, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, nil
	}
	if s.limit == 0 || s.active < s.limit && len(s.waiters) == 0 {
		s.active++
		s.mu.Unlock()
		return true, nil
	}
	w := &slotWaiter{ready: make(chan bool, 1)}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case ok := <-w.ready:
		return ok, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			s.mu.Unlock()
			return false, ctx.Err()
		}
	}
	s.mu.Unlock()
	// The slot came meanwhile: give it on.
	if <-w.ready {
		s.Release()
	}
	return false, ctx.Err()
}

// Release gives a slot back, to the first waiter if there is one.
func (s *Slots) Release() {
	s.mu.Lock()
	if len(s.waiters) > 0 && !s.closed {
		s.pop().ready <- true
	} else if s.active > 0 {
		s.active--
	}
	s.mu.Unlock()
}

// Close makes the waiters and every later acquire give up.
func (s *Slots) Close() {
	s.mu.Lock()
	s.closed = true
	for len(s.waiters) > 0 {
		s.pop().ready <- false
	}
	s.mu.Unlock()
}

// pop takes the first waiter; called with mu held.
func (s *Slots) pop() *slotWaiter {
	w := s.waiters[0]
	s.waiters[0] = nil
	s.waiters = s.waiters[1:]
	if len(s.waiters) == 0 {
		s.waiters = nil // let a burst's backing array go
	}
	return w
}
