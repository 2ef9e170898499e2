package rpc

import (
	"context"
	"errors"

	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
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
//
// The turn's mechanics (who holds it, the line, asking the reader goroutine
// to step aside, the idle wait) and the reader goroutine's loop are
// conn.Turn's; this file decides with the link's calls when a call may take
// it, and a caller's reading with it.
// readLoop is the reader goroutine: it reads while it holds the turn and
// waits for it while a caller reads, until the connection fails. When it
// ends, every call still pending fails.
func (l *clientLink) readLoop() {
	defer l.cc.wg.Done()
	l.turn.ReadLoop(l.Link, &l.mu, func(b transport.Buffer) bool { return l.dispatch(b, nil) })
	l.cc.forget(l, true)
	// The calls fail now, not after the link's goroutines: one of them may
	// be in the transport's Close, which can take its close grace to flush
	// to a peer that is gone (keepalive's close).
	l.failAll(l.CloseStatus())
	l.Wait()
	l.stats.end()
	l.chz.Close()
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
	// Nothing else in flight: the next lone call takes the free turn;
	// anything else that comes wakes the reader goroutine.
	mayIdle := !mine && others == 0 && len(l.streams) == 0
	l.turn.PassLocked(others, mayIdle, l.Ctx.Err() == nil)
	l.mu.Unlock()
}

// mayReadLocked decides, in register (l.mu held), whether call p, just added
// to pending, may take the turn.
func (l *clientLink) mayReadLocked(p *pendingCall) {
	p.mayRead = l.turn.MayReadLocked(len(l.pending) == 1)
}

// wantTurn is called by a caller whose request has left: it takes the turn
// if it is free, or waits in line for it, asking the reader goroutine to
// step aside if that holds it.
func (l *clientLink) wantTurn(id uint64, p *pendingCall) conn.TurnState {
	if !p.mayRead {
		return conn.TurnOutcome // the reader goroutine reads for every call
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[id]; !ok || l.Ctx.Err() != nil {
		return conn.TurnOutcome // delivered already, or failAll delivers it
	}
	return l.turn.WantLocked(p, len(l.pending) == 1)
}

// TakeTurn hands the read turn to the call's caller (conn.TurnWaiter):
// its done channel is empty (it has no outcome yet, or it would have left
// the line), so the send never blocks.
func (p *pendingCall) TakeTurn() { p.done <- result{turn: true} }

// await waits for call id's outcome, reading it itself when it holds the
// turn. Its error is the status of a ctx that ended first.
func (l *clientLink) await(ctx context.Context, id uint64, p *pendingCall) (result, error) {
	st := l.wantTurn(id, p)
	for {
		if st == conn.TurnHeld {
			if r, ok := l.readOwn(ctx, p); ok {
				return r, nil
			}
			st = conn.TurnOutcome // ctx ended, or the link is closed: failAll delivers
		}
		select {
		case r := <-p.done:
			if r.turn {
				st = conn.TurnHeld
				continue
			}
			return r, nil
		case <-ctx.Done():
			return l.giveUp(ctx, id, p, st == conn.TurnQueued)
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
	inLine := l.turn.LeaveLocked(p)
	handed := queued && pending && !inLine // the turn's token is in done
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
