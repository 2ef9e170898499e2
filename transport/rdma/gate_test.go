package rdma

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

// TestGateBounds: a gate gives places up to its global and per-source
// bounds; beyond them a hello waits, and a source with too many waiting is
// refused; a place given back goes to a waiter.
func TestGateBounds(t *testing.T) {
	g := newGate(4, 2)
	g.maxWaiting, g.totalWaiting = 2, 3
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	mustEnter := func(src netip.Addr) {
		t.Helper()
		if w, err := g.try(src); err != nil || w != nil {
			t.Fatalf("%v did not get a free place: waiter %v, %v", src, w != nil, err)
		}
	}
	mustWait := func(src netip.Addr) chan struct{} {
		t.Helper()
		w, err := g.try(src)
		if err != nil || w == nil {
			t.Fatalf("%v should wait: waiter %v, %v", src, w != nil, err)
		}
		return w
	}
	mustEnter(a)
	mustEnter(a)
	wa := mustWait(a) // a's two places are taken
	mustEnter(b)
	mustEnter(b)
	wc := mustWait(c) // all four are
	mustWait(a)
	if _, err := g.try(a); !errors.Is(err, errHandshakesBusy) {
		t.Fatalf("a third waiter from a source allowed two: %v", err)
	}
	if _, err := g.try(c); !errors.Is(err, errHandshakesBusy) {
		t.Fatalf("a fourth waiter in all where three are allowed: %v", err)
	}
	if held, waiting := g.inProgress(); held != 4 || waiting != 3 {
		t.Fatalf("in progress %d, waiting %d; want 4 and 3", held, waiting)
	}
	g.leave(b)
	// a was first in turn but holds its two: c, next, gets the place.
	if closed(wa) || !closed(wc) {
		t.Fatalf("a place freed went to a %v, c %v; want c (a holds its share)", closed(wa), closed(wc))
	}
	g.leave(a)
	// a's own place freed: its oldest waiter gets it.
	if !closed(wa) {
		t.Fatal("a place a gave back did not go to a's oldest waiter")
	}
	if held, waiting := g.inProgress(); held != 4 || waiting != 1 {
		t.Fatalf("in progress %d, waiting %d; want 4 and 1", held, waiting)
	}
}

// TestGateFairness: a source with many hellos waiting does not starve
// another: places that free go to the waiting sources in turn, and the
// flooding source never holds more than its share.
func TestGateFairness(t *testing.T) {
	g := newGate(4, 3)
	g.maxWaiting, g.totalWaiting = 1000, 1000
	flood, real := netip.MustParseAddr("192.0.2.66"), netip.MustParseAddr("10.0.0.1")
	for range 3 {
		if w, err := g.try(flood); err != nil || w != nil {
			t.Fatalf("flood's first places: %v %v", w, err)
		}
	}
	if w, err := g.try(real); err != nil || w != nil {
		t.Fatal("the fourth place did not go to another source while the flood held its three")
	}
	for range 100 {
		if _, err := g.try(flood); err != nil {
			t.Fatal(err)
		}
	}
	var realWaiters []chan struct{}
	for range 5 {
		w, err := g.try(real)
		if err != nil || w == nil {
			t.Fatalf("real client should wait: %v", err)
		}
		realWaiters = append(realWaiters, w)
	}
	// Each round both sources give a place back: with the flood at its
	// share, every second place goes to the real client's waiters, until
	// they are all served.
	for round := range 5 {
		g.leave(real)
		g.leave(flood)
		served := 0
		for _, w := range realWaiters {
			if closed(w) {
				served++
			}
		}
		if served < round+1 {
			t.Fatalf("after %d rounds %d of the real client's waiters served", round+1, served)
		}
		if s := g.sources[flood]; s != nil && s.held > g.perSource {
			t.Fatalf("the flood holds %d places, beyond its %d", s.held, g.perSource)
		}
	}
	for _, w := range realWaiters {
		if !closed(w) {
			t.Fatal("a real client's waiter never served")
		}
	}
}

// TestGateCancel: a waiter whose context ends leaves the queue, or gives
// back the place it was handed as it ended; nothing stays counted.
func TestGateCancel(t *testing.T) {
	g := newGate(1, 1)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if _, err := g.enter(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	waited, err := g.enter(ctx, b)
	if !waited || !errors.Is(err, context.Canceled) {
		t.Fatalf("enter with the place taken and ctx ended: waited %v, %v", waited, err)
	}
	if held, waiting := g.inProgress(); held != 1 || waiting != 0 || len(g.sources) != 1 || len(g.turn) != 0 {
		t.Fatalf("after a cancelled wait: %d held, %d waiting, %d sources, %d in turn", held, waiting, len(g.sources), len(g.turn))
	}
	// Handed a place as its ctx ended: cancel says so, and leave gives it back.
	w, _ := g.try(b)
	g.leave(a)
	if !closed(w) || g.cancel(b, w) {
		t.Fatal("the waiter was not handed the freed place")
	}
	g.leave(b)
	if held, waiting := g.inProgress(); held != 0 || waiting != 0 || len(g.sources) != 0 {
		t.Fatalf("after all left: %d held, %d waiting, %d sources", held, waiting, len(g.sources))
	}
}

func TestSourceOf(t *testing.T) {
	for addr, want := range map[net.Addr]string{
		&net.TCPAddr{IP: net.ParseIP("10.9.9.1"), Port: 5}:          "10.9.9.1",
		&net.TCPAddr{IP: net.ParseIP("::ffff:10.9.9.1"), Port: 5}:   "10.9.9.1",
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 5, Zone: ""}: "fe80::1",
	} {
		if got := sourceOf(addr).String(); got != want {
			t.Errorf("sourceOf(%v) = %s, want %s", addr, got, want)
		}
	}
}

func closed(w chan struct{}) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}
