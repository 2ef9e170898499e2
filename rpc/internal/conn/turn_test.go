package conn

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/transport"
)

// waiter is a caller in line for the turn: turns counts the turns handed
// to it.
type waiter struct{ turns int }

func (w *waiter) TakeTurn() { w.turns++ }

// arrivals is a transport that reports arrivals: f is the callback set.
type arrivals struct {
	transport.Conn
	f func()
}

func (a *arrivals) OnArrival(f func()) bool { a.f = f; return true }

// TestTurnStepAside walks a turn from the reader goroutine to a lone
// caller and back: the caller asks (the reader's Recv context ends), the
// reader steps aside and hands it the turn, the caller passes it back.
func TestTurnStepAside(t *testing.T) {
	var mu sync.Mutex
	var turn Turn
	turn.Init(nil)
	w := &waiter{}
	if turn.MayReadLocked(true) {
		t.Fatal("the first call may read: it follows no lone call")
	}
	if !turn.MayReadLocked(true) {
		t.Fatal("a lone call after a lone call may not read")
	}
	if st := turn.WantLocked(w, true); st != TurnQueued {
		t.Fatalf("want while the reader holds it: %v, want queued", st)
	}
	if !turn.asked() || !errors.Is(turn.readerCtx().Err(), context.Canceled) {
		t.Fatal("the reader was not asked to step aside")
	}
	if !turn.stepAsideLocked(true) || w.turns != 1 {
		t.Fatalf("step aside: %d turns handed, want 1", w.turns)
	}
	if h, _, n := turn.StateLocked(); h != TurnCaller || n != 0 || turn.asked() || turn.StepAsides() != 1 {
		t.Fatalf("after the step aside: holder %v, %d waiting, asked %v", h, n, turn.asked())
	}
	turn.PassLocked(0, true, true) // no arrivals: the reader is woken
	turn.await(&mu, nil)
	if h, idle, _ := turn.StateLocked(); h != TurnReader || idle {
		t.Fatalf("after the pass back: holder %v, idle %v", h, idle)
	}
	if turn.stepAsideLocked(true) {
		t.Fatal("stepped aside with nobody in line")
	}
}

// TestTurnIdle: on a transport that reports arrivals, a lone caller leaves
// the turn free and idle; the next lone caller takes it without the reader
// goroutine, and an arrival wakes the reader to take a free turn.
func TestTurnIdle(t *testing.T) {
	var mu sync.Mutex
	var turn Turn
	a := &arrivals{}
	turn.Init(a)
	w := &waiter{}
	turn.PassLocked(0, true, true) // as after a lone call answered
	if h, idle, _ := turn.StateLocked(); h != TurnFree || !idle || a.f == nil {
		t.Fatalf("after the pass: holder %v, idle %v, callback set %v", h, idle, a.f != nil)
	}
	if st := turn.WantLocked(w, true); st != TurnHeld {
		t.Fatalf("want a free turn: %v, want held", st)
	}
	if _, idle, _ := turn.StateLocked(); idle {
		t.Fatal("still idle once taken")
	}
	turn.PassLocked(0, true, true)
	a.f() // a frame arrives
	turn.await(&mu, nil)
	if h, idle, _ := turn.StateLocked(); h != TurnReader || idle {
		t.Fatalf("after an arrival: holder %v, idle %v", h, idle)
	}
}

// TestTurnHandOn: a caller passing its turn hands it to the one caller in
// line when that is the only other call in flight; one that leaves the
// line is not handed it.
func TestTurnHandOn(t *testing.T) {
	var turn Turn
	turn.Init(nil)
	turn.holder = TurnCaller
	w1, w2 := &waiter{}, &waiter{}
	if turn.WantLocked(w1, false) != TurnQueued || turn.WantLocked(w2, false) != TurnQueued {
		t.Fatal("not queued behind a caller")
	}
	if !turn.LeaveLocked(w1) || turn.LeaveLocked(w1) {
		t.Fatal("leaving the line")
	}
	turn.PassLocked(1, false, true)
	if w1.turns != 0 || w2.turns != 1 {
		t.Fatalf("turns handed: %d, %d; want 0, 1", w1.turns, w2.turns)
	}
	turn.ClearLocked()
}
