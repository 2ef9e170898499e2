package credit

import "fmt"

// Lent credits (docs/rdma.md, "Shared receive queue"): a receiver whose
// data receives come from one shared pool gives each connection a small
// guaranteed window and lends it more credits, from the pool's spare
// buffers, when the peer has used all it knows of; the peer gives lent
// credits back once idle. The Pool counts what is committed to windows;
// the Ledger and the Window carry one connection's share.

// MaxLend is the most credits one message can lend (a 12-bit field on the
// wire).
const MaxLend = 1<<12 - 1

// MaxWindow is the largest a window can grow by lending (credits travel in
// 16 bits).
const MaxWindow = MaxGrant

// Lend adds n credits the peer lent: the window and the credits available
// grow by n. A window beyond MaxWindow is a violation.
func (w *Window) Lend(n int) error {
	if n < 0 || n > MaxLend || w.max+n > MaxWindow {
		return fmt.Errorf("%w: peer lent %d credits to a window of %d", ErrViolation, n, w.max)
	}
	w.max += n
	w.avail += n
	return nil
}

// GiveBack shrinks the window towards keep credits by credits it has
// available, keeping one for the give-back message itself, and returns how
// many it gave up (at most MaxLend; 0 when it has none to spare or the
// window is no larger than keep). The caller then takes that one credit
// (Take) and tells the peer in a give-back message: taking a credit, it
// needs no control receive at the peer, and since the peer returns it (an
// empty message is posted again at once), an idle window comes down to
// keep in a give-back or two.
func (w *Window) GiveBack(keep int) int {
	n := min(w.avail-1, w.max-keep, MaxLend)
	if n <= 0 {
		return 0
	}
	w.max -= n
	w.avail -= n
	return n
}

// NewLentLedger returns the ledger of a window of r credits of which only
// base are guaranteed: the rest (lent from the start, committed by the
// caller) may be given back.
func NewLentLedger(r, base int) *Ledger {
	l := NewLedger(r)
	l.base = min(base, r)
	return l
}

// Exhausted reports whether the peer has used every credit it holds (as far
// as this side knows): the sign of demand on which a receiver lends.
func (l *Ledger) Exhausted() bool { return l.unreturned == l.recvs }

// Threshold returns how many credits must be owed for a credit-only
// message, for the window as it is now.
func (l *Ledger) Threshold() int { return l.threshold }

// Recvs returns the peer's window: the guaranteed one plus what is lent.
func (l *Ledger) Recvs() int { return l.recvs }

// Lent returns the credits of the peer's window beyond the guaranteed one.
func (l *Ledger) Lent() int { return l.recvs - l.base }

// Lend grows the peer's window by n credits, committed from the pool by the
// caller, and owes the peer the news (TakeLend). Lend only when Exhausted,
// nothing lent is still untold, and n is at most the window: then the
// credits the peer holds are enough to reach the (larger) credit-only
// threshold, so the lend always finds a message to ride on.
func (l *Ledger) Lend(n int) {
	if n <= 0 || n > l.recvs || l.lendOwed > 0 || l.recvs+n > MaxWindow {
		panic(fmt.Sprintf("credit: Lend(%d) to a window of %d with %d untold", n, l.recvs, l.lendOwed))
	}
	l.recvs += n
	l.lendOwed += n
	l.threshold = Threshold(l.recvs)
}

// LendOwed returns the credits lent and not yet told.
func (l *Ledger) LendOwed() int { return l.lendOwed }

// TakeLend takes the lent credits to tell the peer on an outgoing message
// (at most MaxLend).
func (l *Ledger) TakeLend() int {
	n := min(l.lendOwed, MaxLend)
	l.lendOwed -= n
	return n
}

// TakeBack records a give-back message, after its own arrival (Arrived):
// the peer's window shrinks by n. Only lent credits the peer was told of
// can come back, and only ones it is not using. A lend not yet told is
// withdrawn with it: the peer is idle, and the lend's news might never
// come — a give-back of ours returns credits but cannot carry it, so the
// peer can be left with fewer credits than the (larger) threshold while
// the lend waits for a credit-only message. It returns the credits that
// left the window, n and the withdrawn lend, for the caller to release.
func (l *Ledger) TakeBack(n int) (freed int, err error) {
	if n <= 0 || n > l.recvs-l.lendOwed-l.base {
		return 0, fmt.Errorf("%w: peer gave back %d credits of %d lent", ErrViolation, n, l.recvs-l.lendOwed-l.base)
	}
	if l.unreturned > l.recvs-l.lendOwed-n {
		return 0, fmt.Errorf("%w: peer gave back %d credits with %d of %d in use", ErrViolation, n, l.unreturned, l.recvs-l.lendOwed)
	}
	freed = n + l.lendOwed
	l.recvs -= freed
	l.lendOwed = 0
	l.threshold = Threshold(l.recvs)
	return freed, nil
}

// Pool counts the buffers of a shared receive pool against what the
// windows of its connections commit: each connection, its window (lent
// credits included) plus Extra control receives. Committed never exceeds
// the buffers the pool has, which is what keeps a posted buffer under
// every message a peer may send (see the package documentation).
type Pool struct {
	buffers   int // registered and part of the pool (posted, or held by a message)
	committed int
}

// Buffers returns the buffers in the pool.
func (p *Pool) Buffers() int { return p.buffers }

// Committed returns the buffers committed to windows and control receives.
func (p *Pool) Committed() int { return p.committed }

// Spare returns the buffers not committed.
func (p *Pool) Spare() int { return p.buffers - p.committed }

// Grow adds n buffers, already posted, to the pool.
func (p *Pool) Grow(n int) { p.buffers += n }

// Shrink removes n spare buffers, which the caller takes off the pool (it
// must not post them again); it reports whether there were n spare.
func (p *Pool) Shrink(n int) bool {
	if n > p.Spare() {
		return false
	}
	p.buffers -= n
	return true
}

// Commit commits n buffers if there are n spare, and reports whether it did.
func (p *Pool) Commit(n int) bool {
	if n > p.Spare() {
		return false
	}
	p.committed += n
	return true
}

// CommitUpTo commits up to n spare buffers and returns how many.
func (p *Pool) CommitUpTo(n int) int {
	k := max(0, min(n, p.Spare()))
	p.committed += k
	return k
}

// Release gives back n committed buffers.
func (p *Pool) Release(n int) {
	if n < 0 || n > p.committed {
		panic(fmt.Sprintf("credit: Release(%d) with %d committed", n, p.committed))
	}
	p.committed -= n
}
