package rpc

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The read turn: exactly one goroutine at a time receives a client link's
// frames and dispatches them, so frames are handled in the order they
// arrived. A unary caller whose request has left takes the turn when it can
// and reads until its own response comes, delivering other calls' and
// streams' frames on the way exactly as the reader goroutine would (never
// blocking); then it passes the turn to another waiting caller, or back to
// the reader goroutine. Its response then costs no hand-off from a reader
// to the caller (a goroutine wake-up on the critical path): over rdma:// the
// caller's own Recv polls the completion queue for it.
//
// The reader goroutine reads whenever no caller does (pings, GOAWAY, stream
// frames, late responses of calls given up, keepalive's sign of life). A
// caller that wants the turn while the reader goroutine sits in Recv asks
// it to step aside (turnCtx); the reader then gives the turn to the oldest
// waiting caller and parks until the turn comes back.
//
// Only a call alone in flight, after a call alone too, may take the turn
// (from the reader goroutine, or free), and a caller hands it on only to a
// call then alone in flight: with more calls on the link, the reader
// goroutine reads for all of them, as before. Measured over rdma:// at 16
// callers (bench/results/history/2026-12-01-clientread, one guest boot each), turns passed
// from caller to caller, and a lock of clientLink.mu per call for the turn,
// cost more calls/s and CPU per call than the hand-offs they saved.
// Whoever holds the turn when the link fails passes it to the reader
// goroutine, which alone ends the link (failAll), so a turn is never
// handed to nobody.
type readTurn struct {
	holder  turnHolder
	waiters []*pendingCall // callers waiting for the turn, oldest first
	// lastAlone: the last call registered was alone in flight. A call
	// may take the turn (pendingCall.mayRead) only when it and the one
	// before were alone: under load, calls are alone now and then (all
	// the others answered, their callers not yet back), and a turn taken
	// then only goes back to the reader goroutine. Decided in register,
	// under the lock it takes anyway: a call that may not read takes no
	// lock for the turn.
	lastAlone bool
	wake      chan struct{} // capacity 1: the turn is free, for the parked reader goroutine
	ctx       turnCtx       // the reader goroutine's Recv context
	// idle: the turn is free and the reader goroutine was not woken to
	// take it; the transport's arrival callback (arrived) wakes it for
	// the next message, unless a caller takes the free turn first. A lone
	// call's caller leaves the turn so, on a transport that reports
	// arrivals: consecutive lone calls then pass the turn without waking
	// the reader goroutine twice per call (step aside, turn back).
	idle     bool
	arrivals transport.Arrivals // nil: the transport does not report arrivals
	arrived  func()             // wakes the reader goroutine; made once, OnArrival allocates nothing
	// stepAsides counts the turns the reader goroutine gave a caller
	// from Recv (two wake-ups each: asked, and the turn back), for tests.
	stepAsides atomic.Uint64
}

type turnHolder uint8

const (
	turnReader turnHolder = iota // the reader goroutine (the link starts so)
	turnNone                     // free: the reader goroutine was woken to take it, or a caller takes it first
	turnCaller                   // a unary caller
)

// turnCtx is the context of the reader goroutine's Recv, through which a
// caller asks it to step aside. Its Done channel receives one value per
// request instead of being closed: a closed channel cannot be opened again,
// and a new one per call would be a heap object per call. Err reports the
// request (Canceled) until the reader goroutine takes it up, so a Recv that
// looks at Err, or that selects on Done once and then returns Err (what the
// transports do), gives up either way. Only the reader goroutine's Recv
// sees it.
type turnCtx struct {
	done  chan struct{} // capacity 1: holds a value while asked and Recv has not taken it
	asked atomic.Bool   // changed with clientLink.mu held
}

func (c *turnCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *turnCtx) Done() <-chan struct{}       { return c.done }
func (c *turnCtx) Value(any) any               { return nil }
func (c *turnCtx) Err() error {
	if c.asked.Load() {
		return context.Canceled
	}
	return nil
}

// ask asks the reader goroutine to step aside. Called with l.mu held.
func (c *turnCtx) ask() {
	if !c.asked.Swap(true) {
		c.done <- struct{}{}
	}
}

// clear takes a request up. Called with l.mu held.
func (c *turnCtx) clear() {
	c.asked.Store(false)
	select {
	case <-c.done:
	default: // Recv took it
	}
}

func (t *readTurn) init(tc transport.Conn) {
	t.wake = make(chan struct{}, 1)
	t.ctx.done = make(chan struct{}, 1)
	t.arrivals, _ = tc.(transport.Arrivals)
	t.arrived = t.wakeReader
}

// wakeReader wakes the reader goroutine parked for the free turn. It never
// blocks: it is the transport's arrival callback too.
func (t *readTurn) wakeReader() {
	select {
	case t.wake <- struct{}{}:
	default: // woken already
	}
}

// unidleLocked ends the idle wait: the reader goroutine is woken to take
// the free turn (wake), or a caller takes it (no wake). Called with
// clientLink.mu held.
func (t *readTurn) unidleLocked(wake bool) {
	if !t.idle {
		return
	}
	t.idle = false
	t.arrivals.OnArrival(nil)
	if wake {
		t.wakeReader()
	}
}

// leaveLine takes p out of the waiters. Called with l.mu held.
func (t *readTurn) leaveLine(p *pendingCall) {
	p.waiting = false
	for i, w := range t.waiters {
		if w == p {
			n := copy(t.waiters[i:], t.waiters[i+1:])
			t.waiters[i+n] = nil
			t.waiters = t.waiters[:i+n]
			return
		}
	}
}

// clearLine empties the line when the link ends. Called with l.mu held.
func (t *readTurn) clearLine() {
	for i, w := range t.waiters {
		w.waiting = false
		t.waiters[i] = nil
	}
	t.waiters = t.waiters[:0]
}

// readLoop is the reader goroutine: it reads while it holds the turn and
// waits for it while a caller reads, until the connection fails. When it
// ends, every call still pending fails.
func (l *clientLink) readLoop() {
	defer l.cc.wg.Done()
	l.readTurns()
	l.cc.forget(l, true)
	// The calls fail now, not after the link's goroutines: one of them may
	// be in the transport's Close, which can take its close grace to flush
	// to a peer that is gone (keepalive's close).
	l.failAll(l.CloseStatus())
	l.Wait()
	l.stats.end()
}

// readTurns reads frames while the reader goroutine holds the turn; it
// returns, holding it, once the link is closed.
func (l *clientLink) readTurns() {
	for {
		b, err := l.RecvFrame(&l.turn.ctx)
		if err == nil {
			if !l.dispatch(b, nil) {
				return
			}
			if !l.turn.ctx.asked.Load() {
				continue
			}
		} else if !errors.Is(err, context.Canceled) {
			return // the link is closed
		}
		if l.stepAside() {
			l.awaitTurn()
		}
	}
}

// stepAside gives the reader goroutine's turn to the oldest waiting caller,
// and reports whether there was one (the callers that asked may have had
// their outcome meanwhile, or given up).
func (l *clientLink) stepAside() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.turn.ctx.clear()
	if len(l.turn.waiters) == 0 || l.Ctx.Err() != nil {
		return false
	}
	l.turn.stepAsides.Add(1)
	l.turn.holder = turnCaller
	l.handTurnLocked()
	return true
}

// handTurnLocked hands the turn to the oldest waiting caller. Called with
// l.mu held and a waiter: its done channel is empty (it has no outcome yet,
// or it would have left the line), so the send never blocks.
func (l *clientLink) handTurnLocked() {
	w := l.turn.waiters[0]
	l.turn.leaveLine(w)
	w.done <- result{turn: true}
}

// awaitTurn parks the reader goroutine until the turn is free, and takes it.
// A turn left idle is taken when the link closes too: Recv then ends it.
func (l *clientLink) awaitTurn() {
	closed := l.Ctx.Done()
	for {
		select {
		case <-l.turn.wake:
		case <-closed:
			closed = nil
		}
		l.mu.Lock()
		if l.turn.holder == turnNone {
			l.turn.unidleLocked(false)
			l.turn.holder = turnReader
			l.mu.Unlock()
			return
		}
		l.mu.Unlock() // a caller took it first
	}
}

// passTurn gives up a caller's turn (mine: the caller's own call is still
// pending): to the caller waiting in line when that is the only other call
// in flight; else (or when the link is closed, for the reader goroutine to
// end it) it frees the turn and wakes the reader goroutine, unless a
// caller takes it first. Callers left in line get their outcome from
// whoever reads.
func (l *clientLink) passTurn(mine bool) {
	l.mu.Lock()
	others := len(l.pending)
	if mine {
		others--
	}
	switch {
	case len(l.turn.waiters) == 1 && others == 1 && l.Ctx.Err() == nil:
		l.handTurnLocked()
	case !mine && others == 0 && len(l.turn.waiters) == 0 && len(l.streams) == 0 && l.Ctx.Err() == nil &&
		l.turn.arrivals != nil && l.turn.arrivals.OnArrival(l.turn.arrived):
		// Nothing else in flight: the next lone call takes the free
		// turn; anything else that comes wakes the reader goroutine.
		l.turn.holder = turnNone
		l.turn.idle = true
	default:
		l.turn.holder = turnNone
		l.turn.wakeReader()
	}
	l.mu.Unlock()
}

// mayReadLocked decides, in register (l.mu held), whether call p, just added
// to pending, may take the turn.
func (l *clientLink) mayReadLocked(p *pendingCall) {
	alone := len(l.pending) == 1
	p.mayRead = alone && l.turn.lastAlone
	l.turn.lastAlone = alone
	if !p.mayRead {
		l.turn.unidleLocked(true) // the reader goroutine reads for it
	}
}

// turnState is where a caller stands with the turn.
type turnState uint8

const (
	turnOutcome turnState = iota // neither holds nor waits: its outcome is in done, or on its way
	turnQueued                   // waiting among the waiters
	turnHeld                     // holds the turn
)

// wantTurn is called by a caller whose request has left: it takes the turn
// if it is free, or waits in line for it, asking the reader goroutine to
// step aside if that holds it.
func (l *clientLink) wantTurn(id uint64, p *pendingCall) turnState {
	if !p.mayRead {
		return turnOutcome // the reader goroutine reads for every call
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[id]; !ok || l.Ctx.Err() != nil {
		return turnOutcome // delivered already, or failAll delivers it
	}
	switch l.turn.holder {
	case turnNone, turnReader:
		if len(l.pending) > 1 {
			// The reader goroutine reads for every call (a free turn
			// is its: it was woken to take it, or is now).
			l.turn.unidleLocked(true)
			return turnOutcome
		}
		if l.turn.holder == turnNone {
			l.turn.unidleLocked(false)
			l.turn.holder = turnCaller
			return turnHeld
		}
		l.turn.ctx.ask()
	}
	p.waiting = true
	l.turn.waiters = append(l.turn.waiters, p)
	return turnQueued
}

// await waits for call id's outcome, reading it itself when it holds the
// turn. Its error is the status of a ctx that ended first.
func (l *clientLink) await(ctx context.Context, id uint64, p *pendingCall) (result, error) {
	st := l.wantTurn(id, p)
	for {
		if st == turnHeld {
			if r, ok := l.readOwn(ctx, p); ok {
				return r, nil
			}
			st = turnOutcome // ctx ended, or the link is closed: failAll delivers
		}
		select {
		case r := <-p.done:
			if r.turn {
				st = turnHeld
				continue
			}
			return r, nil
		case <-ctx.Done():
			return l.giveUp(ctx, id, p, st == turnQueued)
		}
	}
}

// readOwn reads and dispatches frames, holding the turn, until p's outcome
// came (true), ctx ended or the link failed; it passes the turn on in any
// case. A Recv that gives up for ctx took no frame.
func (l *clientLink) readOwn(ctx context.Context, p *pendingCall) (result, bool) {
	for {
		b, err := l.RecvFrame(ctx)
		if err != nil || !l.dispatch(b, p) {
			l.passTurn(true)
			return result{}, false
		}
		if len(p.done) > 0 {
			l.passTurn(false)
			return <-p.done, true
		}
	}
}

// giveUp ends call id whose ctx ended while it waited (queued: in line for
// the turn). When the outcome came meanwhile it is used; a turn handed to
// the call is passed on.
func (l *clientLink) giveUp(ctx context.Context, id uint64, p *pendingCall, queued bool) (result, error) {
	l.mu.Lock()
	_, pending := l.pending[id]
	delete(l.pending, id)
	handed := queued && pending && !p.waiting // the turn's token is in done
	if p.waiting {
		l.turn.leaveLine(p)
	}
	retire := pending && l.idleDraining()
	l.mu.Unlock()
	if retire {
		l.retire()
	}
	if handed {
		<-p.done
		l.passTurn(false)
	}
	if !pending {
		return <-p.done, nil // the outcome raced the cancellation: use it
	}
	// A deadline needs no cancel frame: the server rebuilt it, its handler
	// sees DeadlineExceeded on its own, and its RESPONSE, which the server
	// sends however the handler ends, frees the call's slot (expired). A
	// cancel is told: the server counts the call no more once the CANCEL
	// arrived, so its slot frees once the CANCEL has left (queueEnd), and
	// no later REQUEST overtakes it.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		l.mu.Lock()
		if l.Ctx.Err() == nil {
			if l.expired == nil {
				l.expired = make(map[uint64]struct{})
			}
			l.expired[id] = struct{}{}
		}
		l.mu.Unlock()
	} else {
		l.QueueEnd(wire.AppendCancel(nil, id))
	}
	return result{}, status.FromContextError(ctx.Err()).Err()
}
