package rdma

import "sync"

// notifier wakes the goroutines waiting for a condition that a mutex, held
// around wait, forget and broadcast, guards. Each waiter waits on a channel
// of its own, taken from a pool and given back by forget, so that sleeping
// and waking allocate nothing.
type notifier struct{ waiters []chan struct{} }

var waitChans = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// wait returns a channel that receives at the next broadcast. The waiter
// must call forget with it once its wait is over, however it ended.
func (n *notifier) wait() chan struct{} {
	ch := waitChans.Get().(chan struct{})
	select {
	case <-ch: // a broadcast that came after its last owner stopped waiting
	default:
	}
	n.waiters = append(n.waiters, ch)
	return ch
}

// forget ends the wait on ch and gives ch back to the pool.
func (n *notifier) forget(ch chan struct{}) {
	for i, w := range n.waiters {
		if w == ch {
			last := len(n.waiters) - 1
			n.waiters[i], n.waiters[last] = n.waiters[last], nil
			n.waiters = n.waiters[:last]
			break
		}
	}
	waitChans.Put(ch)
}

// signal wakes the longest waiting waiter, if any.
func (n *notifier) signal() {
	if len(n.waiters) == 0 {
		return
	}
	ch := n.waiters[0]
	last := copy(n.waiters, n.waiters[1:])
	n.waiters[last] = nil
	n.waiters = n.waiters[:last]
	select {
	case ch <- struct{}{}:
	default: // already woken
	}
}

// broadcast wakes every waiter.
func (n *notifier) broadcast() {
	for i, ch := range n.waiters {
		select {
		case ch <- struct{}{}:
		default: // already woken
		}
		n.waiters[i] = nil
	}
	n.waiters = n.waiters[:0]
}
