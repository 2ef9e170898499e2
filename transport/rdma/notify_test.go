package rdma

import (
	"testing"
)

// A wait that a broadcast ends, and one that ends otherwise, allocate
// nothing once the pool holds a channel; a broadcast wakes every waiter.
func TestNotifierNoAllocs(t *testing.T) {
	var n notifier
	cycle := func() {
		a, b := n.wait(), n.wait()
		n.broadcast()
		<-a
		<-b
		n.forget(a)
		n.forget(b)
		c := n.wait() // ended by something else: forgotten unwoken
		n.forget(c)
	}
	cycle()
	if got := testing.AllocsPerRun(100, cycle); got != 0 {
		t.Errorf("%v allocations per wait and wake", got)
	}
	if len(n.waiters) != 0 {
		t.Errorf("%d waiters left after every wait was forgotten", len(n.waiters))
	}
}

// A channel given back with a late token in it does not wake its next owner.
func TestNotifierStaleToken(t *testing.T) {
	var n notifier
	a := n.wait()
	n.broadcast() // a is woken but its owner left by another way
	n.forget(a)
	b := n.wait()
	select {
	case <-b:
		t.Fatal("a new wait was woken by an old broadcast")
	default:
	}
	n.forget(b)
}

// signal wakes one waiter, the one waiting longest, and leaves the others
// waiting; with nobody waiting it does nothing.
func TestNotifierSignalWakesOne(t *testing.T) {
	var n notifier
	n.signal()
	a, b, c := n.wait(), n.wait(), n.wait()
	n.signal()
	woken := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	if !woken(a) || woken(b) || woken(c) {
		t.Fatal("signal did not wake exactly the first waiter")
	}
	if len(n.waiters) != 2 {
		t.Fatalf("%d waiters after one of three was signalled", len(n.waiters))
	}
	n.signal()
	if !woken(b) || woken(c) {
		t.Fatal("the second signal did not wake exactly the second waiter")
	}
	n.forget(a)
	n.forget(b)
	n.forget(c)
	if len(n.waiters) != 0 {
		t.Errorf("%d waiters left after every wait was forgotten", len(n.waiters))
	}
}
