package rpc

import (
	"context"
	"sync"
	"time"
)

// A unary call's context is its callStream: one allocation serves as the
// admitted request, the handler's context (callContext's values, the
// deadline, cancellation) and its serverCall, where context.WithCancel,
// context.WithDeadline, a callContext and a serverCall cost five or more.
// It is never pooled: a handler may keep its context after it returns.
//
// It ends when the client cancels (admission.cancel), its deadline passes, the
// link closes (serverLink.cancelRunning) or the handler returns. Its Value
// answers the call's keys and nothing else (the link's context carries no
// values), so context.Cause, which looks for the standard library's
// cancelCtx through Value, falls back to Err as it should.
type callCtx struct {
	cmu    sync.Mutex
	done   chan struct{} // made when first asked for
	err    error
	timer  *time.Timer
	afters []*afterFunc
}

// afterFunc is one AfterFunc registration (a pointer, so that its stop
// finds it).
type afterFunc struct{ f func() }

// closedChan is the Done of a context that ended before anyone asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *callCtx) Done() <-chan struct{} {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedChan
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *callCtx) Err() error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.err
}

// end ends the context with err; the first err sticks.
func (c *callCtx) end(err error) {
	c.cmu.Lock()
	if c.err != nil {
		c.cmu.Unlock()
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	afters := c.afters
	c.afters = nil
	c.cmu.Unlock()
	for _, a := range afters {
		go a.f()
	}
}

// AfterFunc lets context.WithCancel, WithTimeout and context.AfterFunc
// over a handler's context register with it, instead of starting a
// goroutine that waits on Done for each.
func (c *callCtx) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	c.cmu.Lock()
	if c.err != nil {
		c.cmu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.afters = append(c.afters, a)
	c.cmu.Unlock()
	return func() bool {
		c.cmu.Lock()
		defer c.cmu.Unlock()
		for i, b := range c.afters {
			if b == a {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Deadline, Done, Err and Value make a callStream the handler's context.
func (st *callStream) Deadline() (time.Time, bool) { return st.deadline, !st.deadline.IsZero() }

func (st *callStream) Value(key any) any { return st.cc.Value(key) }

// start arms st's deadline, if it has one, when its handler is about to
// run; a deadline already passed ends it at once.
func (st *callStream) start() {
	if st.deadline.IsZero() {
		return
	}
	d := time.Until(st.deadline)
	if d <= 0 {
		st.end(context.DeadlineExceeded)
		return
	}
	st.cmu.Lock()
	if st.err == nil {
		st.timer = time.AfterFunc(d, st.expire)
	}
	st.cmu.Unlock()
}

func (st *callStream) expire() { st.end(context.DeadlineExceeded) }

// callBase is the root under what stats handlers add to a call's context
// (TagRPC): st's deadline and cancellation, and no values, since st's own
// Value reaches the stats handlers' through it.
type callBase struct{ st *callStream }

func (b callBase) Deadline() (time.Time, bool) { return b.st.Deadline() }
func (b callBase) Done() <-chan struct{}       { return b.st.Done() }
func (b callBase) Err() error                  { return b.st.Err() }
func (b callBase) Value(any) any               { return nil }
