package credit

import (
	"errors"
	"fmt"
)

// Extra is the number of control receives a side posts beyond its data
// receives: enough for every credit-only message the peer can have
// outstanding (see the package documentation).
const Extra = 2

// MaxGrant is the largest number of credits one message can return (a
// 16-bit field on the wire).
const MaxGrant = 1<<16 - 1

// ErrViolation is wrapped by every error caused by a peer that broke the
// credit protocol.
var ErrViolation = errors.New("credit protocol violation")

// Threshold is how many credits a side with r data receives must owe before
// it sends a credit-only message.
func Threshold(r int) int { return (r + 1) / 2 }

// Window is the sender's view: credits for the peer's posted data receives.
type Window struct {
	max   int // the peer's data receives: credits can never exceed it
	avail int
}

// NewWindow returns a window for a peer that posted r data receives.
func NewWindow(r int) *Window { return &Window{max: r, avail: r} }

// Avail returns the credits available now.
func (w *Window) Avail() int { return w.avail }

// Max returns the peer's data receive count.
func (w *Window) Max() int { return w.max }

// Outstanding returns the data messages sent and not yet returned.
func (w *Window) Outstanding() int { return w.max - w.avail }

// Take takes one credit and reports whether there was one.
func (w *Window) Take() bool {
	if w.avail == 0 {
		return false
	}
	w.avail--
	return true
}

// GrantControl adds the n credits a credit-only message returned. The
// protocol sends one only when at least Threshold(R) are owed, which is what
// bounds control messages to Extra receives; fewer is a violation.
func (w *Window) GrantControl(n int) error {
	if n < Threshold(w.max) {
		return fmt.Errorf("%w: credit-only message returned %d credits, below the threshold %d", ErrViolation, n, Threshold(w.max))
	}
	return w.Grant(n)
}

// Grant adds n credits the peer returned. Returning more than is
// outstanding is a violation; the window is left unchanged.
func (w *Window) Grant(n int) error {
	if n < 0 || n > w.max-w.avail {
		return fmt.Errorf("%w: peer returned %d credits with only %d outstanding", ErrViolation, n, w.max-w.avail)
	}
	w.avail += n
	return nil
}

// Ledger is the receiver's view: data receives consumed, re-posted, and the
// credits owed for them.
type Ledger struct {
	recvs      int // R: our data receives (the peer's window, lent credits included)
	base       int // the guaranteed window, never given back
	threshold  int
	unreturned int // data messages arrived and not yet returned
	owed       int // of those, re-posted: returnable now
	lendOwed   int // credits lent (recvs grew by them) that the peer was not yet told
}

// NewLedger returns the ledger of a side that posted r data receives.
func NewLedger(r int) *Ledger { return &Ledger{recvs: r, base: r, threshold: Threshold(r)} }

// Arrived records a data message taking a data receive. More than R
// unreturned is a violation: the peer sent without a credit.
func (l *Ledger) Arrived() error {
	if l.unreturned == l.recvs {
		return fmt.Errorf("%w: peer sent a data message with all %d credits out", ErrViolation, l.recvs)
	}
	l.unreturned++
	return nil
}

// Reposted records a data receive posted again: one credit more is owed.
func (l *Ledger) Reposted() {
	if l.owed == l.unreturned {
		panic("credit: Reposted without a matching Arrived")
	}
	l.owed++
}

// Owed returns the credits that could be returned now.
func (l *Ledger) Owed() int { return l.owed }

// Unreturned returns the data messages not yet returned.
func (l *Ledger) Unreturned() int { return l.unreturned }

// Piggyback takes the credits owed (at most MaxGrant) to return on an
// outgoing message.
func (l *Ledger) Piggyback() int {
	n := min(l.owed, MaxGrant)
	l.owed -= n
	l.unreturned -= n
	return n
}

// PostBatch returns how many released buffers may wait to be posted again
// together (one doorbell for several): at most limit, and few enough that
// the credits they hold back are never ones the peer waits for. A peer out
// of credits has every credit of the window it knows of unreturned here;
// once its messages are all released, the owed credits must reach the
// threshold or no credit-only message goes, and nothing else would come.
// So at most told-threshold buffers may wait, where told is the window the
// peer knows: with a lend not yet told, the threshold is already the larger
// window's (Lend), and it takes every one of the peer's credits reposted to
// reach it.
func (l *Ledger) PostBatch(limit int) int {
	told := l.recvs - l.lendOwed
	return max(1, min(limit, told-l.threshold+1))
}

// CreditOnly returns the credits to send in a credit-only message, or 0
// when fewer than the threshold are owed.
func (l *Ledger) CreditOnly() int {
	if l.owed < l.threshold {
		return 0
	}
	return l.Piggyback()
}
