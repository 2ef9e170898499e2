package conn

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// Turn is the read turn of a client link: exactly one goroutine at a time
// receives the link's frames and dispatches them, so frames are handled in
// the order they arrived. It is the turn's mechanics only: who holds it,
// the callers waiting in line, the reader goroutine's Recv context through
// which a caller asks it to step aside, and the idle wait on a transport
// that reports arrivals. The rpc package decides, with its calls, when a
// call may take it and reads with it (rpc/clientturn.go says why).
//
// Methods named Locked are called with the owner's mutex held (the mutex
// that guards its calls in flight); the others say what they need.
type Turn struct {
	holder  TurnHolder
	waiters []TurnWaiter // callers waiting for the turn, oldest first
	// lastAlone: the last call registered was alone in flight
	// (MayReadLocked).
	lastAlone bool
	wake      chan struct{} // capacity 1: the turn is free, for the parked reader goroutine
	ctx       turnCtx       // the reader goroutine's Recv context
	// idle: the turn is free and the reader goroutine was not woken to
	// take it; the transport's arrival callback (arrived) wakes it for
	// the next message, unless a caller takes the free turn first.
	idle bool
	// yield: the reader goroutine's dispatch gave a lone stream's waiting
	// receiver a message, and that receiver will want the turn next
	// (YieldLocked); the reader goroutine leaves the turn free and idle
	// after the frame, for it to take (TakeIdleLocked).
	yield    bool
	arrivals transport.Arrivals // nil: the transport does not report arrivals
	arrived  func()             // t.arrive; made once, OnArrival allocates nothing
	// came: the arrival callback ran since the turn was left idle. A
	// wake of the parked reader goroutine that finds the turn idle and
	// nothing come is a stale one (from an earlier free turn a caller
	// took first): the turn stays idle, for the next lone caller.
	came atomic.Bool
	// stepAsides counts the turns the reader goroutine gave a caller
	// from Recv (two wake-ups each: asked, and the turn back), for tests.
	stepAsides atomic.Uint64
}

// A TurnWaiter is a caller that may wait in line for the turn: a pending
// call. TakeTurn hands it the turn; it must not block.
type TurnWaiter interface {
	TakeTurn()
}

// TurnHolder is who holds the turn.
type TurnHolder uint8

const (
	TurnReader TurnHolder = iota // the reader goroutine (the link starts so)
	TurnFree                     // free: the reader goroutine was woken to take it, or a caller takes it first
	TurnCaller                   // a caller
)

// TurnState is where a caller stands with the turn.
type TurnState uint8

const (
	TurnOutcome TurnState = iota // neither holds nor waits: its outcome is in its hands, or on its way
	TurnQueued                   // waiting in line
	TurnHeld                     // holds the turn
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
	asked atomic.Bool   // changed with the owner's mutex held
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

// ask asks the reader goroutine to step aside.
func (c *turnCtx) ask() {
	if !c.asked.Swap(true) {
		c.done <- struct{}{}
	}
}

// clear takes a request up.
func (c *turnCtx) clear() {
	c.asked.Store(false)
	select {
	case <-c.done:
	default: // Recv took it
	}
}

// Init readies t for the link over tc.
func (t *Turn) Init(tc transport.Conn) {
	t.wake = make(chan struct{}, 1)
	t.ctx.done = make(chan struct{}, 1)
	t.arrivals, _ = tc.(transport.Arrivals)
	t.arrived = t.arrive
}

// readerCtx is the context of the reader goroutine's Recv: it ends (with
// Canceled) when a caller asks the reader goroutine to step aside.
func (t *Turn) readerCtx() context.Context { return &t.ctx }

// asked reports whether a caller asked the reader goroutine to step aside.
func (t *Turn) asked() bool { return t.ctx.asked.Load() }

// wakeReader wakes the reader goroutine parked for the free turn. It never
// blocks: it is the transport's arrival callback too.
func (t *Turn) wakeReader() {
	select {
	case t.wake <- struct{}{}:
	default: // woken already
	}
}

// arrive is the transport's arrival callback while the turn is idle: it
// wakes the reader goroutine to take it. It never blocks.
func (t *Turn) arrive() {
	t.came.Store(true)
	t.wakeReader()
}

// UnidleLocked ends the idle wait: the reader goroutine is woken to take
// the free turn (wake), or a caller takes it (no wake).
func (t *Turn) UnidleLocked(wake bool) {
	if !t.idle {
		return
	}
	t.idle = false
	t.arrivals.OnArrival(nil) // arrive no longer runs
	t.came.Store(false)
	if wake {
		t.wakeReader()
	}
}

// LeaveLocked takes w out of the line, and reports whether it was in it.
func (t *Turn) LeaveLocked(w TurnWaiter) bool {
	for i, x := range t.waiters {
		if x == w {
			n := copy(t.waiters[i:], t.waiters[i+1:])
			t.waiters[i+n] = nil
			t.waiters = t.waiters[:i+n]
			return true
		}
	}
	return false
}

// ClearLocked empties the line when the link ends.
func (t *Turn) ClearLocked() {
	clear(t.waiters)
	t.waiters = t.waiters[:0]
}

// ReadLoop is the reader goroutine's reading of l: it reads and dispatches
// frames while it holds the turn, steps aside when a caller asks, and waits
// for the turn back; mu is the owner's mutex, not held. It returns,
// holding the turn, once the link is closed or dispatch returned false
// (it closed the link).
func (t *Turn) ReadLoop(l *Link, mu sync.Locker, dispatch func(transport.Buffer) bool) {
	for {
		b, err := l.RecvFrame(&t.ctx)
		if err == nil {
			if !dispatch(b) {
				return
			}
			if t.yield && t.idleAfterYield(mu, l) {
				t.await(mu, l.Ctx.Done())
				continue
			}
			if !t.ctx.asked.Load() {
				continue
			}
		} else if !errors.Is(err, context.Canceled) {
			return // the link is closed
		}
		mu.Lock()
		stepped := t.stepAsideLocked(l.Ctx.Err() == nil)
		mu.Unlock()
		if stepped {
			t.await(mu, l.Ctx.Done())
		}
	}
}

// idleAfterYield leaves the reader goroutine's turn free and idle, as
// dispatch asked (YieldLocked), unless a caller waits in line or the
// transport has a message waiting already; it reports whether it did (the
// reader goroutine then awaits the turn). mu is the owner's mutex, not
// held.
func (t *Turn) idleAfterYield(mu sync.Locker, l *Link) bool {
	mu.Lock()
	defer mu.Unlock()
	t.yield = false
	return !t.ctx.asked.Load() && l.Ctx.Err() == nil && t.IdleLocked()
}

// YieldLocked asks the reader goroutine, when it holds the turn (dispatch
// runs on it), to leave the turn free and idle after the frame being
// dispatched, and reports whether it asked: the frame was a message for a
// lone stream whose receiver waits for it, and who will read for itself
// next (TakeIdleLocked). Idle, the turn is the reader goroutine's again at
// the next arrival nobody reads, so nothing is left unread.
func (t *Turn) YieldLocked() bool {
	if t.holder == TurnReader {
		t.yield = true
	}
	return t.yield
}

// YieldingLocked reports whether the reader goroutine holds the turn and
// is about to leave it idle (YieldLocked): a caller that finds it so came
// early, not too late.
func (t *Turn) YieldingLocked() bool { return t.holder == TurnReader && t.yield }

// TakeIdleLocked takes the turn for a caller that reads without a call in
// line (a lone stream's receiver), if it is free and idle: not when the
// reader goroutine was woken to take it, which would then have woken for
// nothing. It reports whether it took it; the caller passes it on
// (PassLocked, IdleLocked) when done.
func (t *Turn) TakeIdleLocked() bool {
	if t.holder != TurnFree || !t.idle {
		return false
	}
	t.UnidleLocked(false)
	t.holder = TurnCaller
	return true
}

// IdleLocked leaves a caller's turn free and idle, when no caller waits in
// line and the transport has no message waiting (it reports false, and the
// caller keeps the turn, otherwise): the next arrival nobody reads wakes
// the reader goroutine to take it, unless a caller takes it first.
func (t *Turn) IdleLocked() bool {
	if len(t.waiters) > 0 || t.arrivals == nil || !t.arrivals.OnArrival(t.arrived) {
		return false
	}
	t.holder = TurnFree
	t.idle = true
	return true
}

// stepAsideLocked gives the reader goroutine's turn to the oldest waiting
// caller, and reports whether there was one (the callers that asked may
// have had their outcome meanwhile, or given up) and the link is open.
func (t *Turn) stepAsideLocked(open bool) bool {
	t.ctx.clear()
	if len(t.waiters) == 0 || !open {
		return false
	}
	t.stepAsides.Add(1)
	t.holder = TurnCaller
	t.handLocked()
	return true
}

// handLocked hands the turn to the oldest waiting caller, which has no
// outcome yet (or it would have left the line).
func (t *Turn) handLocked() {
	w := t.waiters[0]
	t.LeaveLocked(w)
	w.TakeTurn()
}

// await parks the reader goroutine until the turn is free, and takes it;
// mu is the owner's mutex, not held. A turn left idle is taken when closed
// is closed too: Recv then ends the link.
func (t *Turn) await(mu sync.Locker, closed <-chan struct{}) {
	for {
		ended := false
		select {
		case <-t.wake:
		case <-closed:
			closed, ended = nil, true
		}
		mu.Lock()
		if t.holder == TurnFree && (!t.idle || ended || t.came.Load()) {
			t.UnidleLocked(false)
			t.holder = TurnReader
			mu.Unlock()
			return
		}
		mu.Unlock() // a caller took it first
	}
}

// PassLocked gives up a caller's turn: to the caller waiting in line when
// that is the only other call in flight (others); else it frees the turn,
// left idle when mayIdle (nothing else in flight, no streams) and the
// transport reports arrivals, else waking the reader goroutine, unless a
// caller takes it first. open: the link is not closed (a closed link's
// turn goes to the reader goroutine, which ends it).
func (t *Turn) PassLocked(others int, mayIdle, open bool) {
	switch {
	case len(t.waiters) == 1 && others == 1 && open:
		t.handLocked()
	case mayIdle && open && len(t.waiters) == 0 &&
		t.arrivals != nil && t.arrivals.OnArrival(t.arrived):
		t.holder = TurnFree
		t.idle = true
	default:
		t.holder = TurnFree
		t.wakeReader()
	}
}

// MayReadLocked decides, as a call is registered, whether it may take the
// turn: when it is alone in flight and the call before it was too.
func (t *Turn) MayReadLocked(alone bool) bool {
	may := alone && t.lastAlone
	t.lastAlone = alone
	if !may {
		t.UnidleLocked(true) // the reader goroutine reads for it
	}
	return may
}

// WantLocked is called for a caller w whose request has left and that may
// read, its outcome not yet delivered, on an open link: it takes the turn
// if it is free and w is alone in flight, or waits in line for it, asking
// the reader goroutine to step aside if that holds it.
func (t *Turn) WantLocked(w TurnWaiter, alone bool) TurnState {
	switch t.holder {
	case TurnFree, TurnReader:
		if !alone {
			// The reader goroutine reads for every call (a free turn
			// is its: it was woken to take it, or is now).
			t.UnidleLocked(true)
			return TurnOutcome
		}
		if t.holder == TurnFree {
			t.UnidleLocked(false)
			t.holder = TurnCaller
			return TurnHeld
		}
		t.ctx.ask()
	}
	t.waiters = append(t.waiters, w)
	return TurnQueued
}

// StateLocked is who holds the turn, whether it is idle and how many
// callers wait, for tests.
func (t *Turn) StateLocked() (holder TurnHolder, idle bool, waiting int) {
	return t.holder, t.idle, len(t.waiters)
}

// StepAsides is how many times the reader goroutine gave the turn to a
// caller from Recv, for tests.
func (t *Turn) StepAsides() uint64 { return t.stepAsides.Load() }

// Backoff counts the messages for which a lone stream's receiver is not
// left the reading, after the reading left to it showed a flood (the next
// frame there already, or the reading taken back for a frame that came
// first): there a reader goroutine reading beside the receiver keeps both
// busy. It is shared by the two ends' readOwn.
type Backoff struct{ n atomic.Int32 }

// BackoffMessages is how many messages a Backoff lasts.
const BackoffMessages = 64

// Start starts the backoff.
func (b *Backoff) Start() { b.n.Store(BackoffMessages) }

// On reports whether the backoff lasts.
func (b *Backoff) On() bool { return b.n.Load() > 0 }

// Allow reports whether the reading may be left to the receiver with this
// message, the backoff over; a message it refuses counts it down.
func (b *Backoff) Allow() bool {
	if b.n.Load() == 0 {
		return true
	}
	b.n.Add(-1)
	return false
}
