package rpc

import (
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/transport"
)

// unreadTurn lets a server connection's reader run a unary call it read
// without first handing the reading to an idle worker, when the call is
// alone on the connection (and the one before was too): the reader reads
// on once the call is answered, as the transport's own echo loop does.
// Handing on costs a worker's wake-up per call, and the worker then waits
// in Recv next to the handler and the client on a machine with few
// processors; at one call at a time nothing arrives meanwhile to read.
//
// The reader must still never stop reading for long (issue 8: pings are
// answered and calls admitted while handlers block), so this is done only
// on a transport that reports arrivals (transport.Arrivals): the first
// message to come while the call runs, or the connection's end, hands the
// reading to a worker (or a goroutine of its own) at once, from the
// transport's goroutine, and the reader becomes a worker when its call is
// done, as after a hand-off up front.
type unreadTurn struct {
	l        *serverLink
	arrivals transport.Arrivals // nil: the transport does not report them, always hand on
	// state is a run's number (state>>2, so that a reader that was
	// handed on, still answering its call, cannot end the next reader's
	// run) and its phase (state&3).
	state   atomic.Uint64
	arrived func() // u.handOn, made once: OnArrival per call allocates nothing
}

// The phases of a run (state&3); state 0, before the first run, is none.
const (
	unreadOff     = 1 + iota // the reader reads
	unreadRunning            // the reader runs a call; nobody reads
	unreadHanded             // something arrived meanwhile: the reading was handed on
)

func (u *unreadTurn) init(l *serverLink) {
	u.l = l
	u.arrivals, _ = l.Conn.(transport.Arrivals)
	u.arrived = u.handOn
}

// run runs st on the reader unless a message is waiting already (ran
// false: nothing was done). reading reports whether the caller still holds
// the reading; if not, it was handed on while st ran.
func (u *unreadTurn) run(st *callStream) (ran, reading bool) {
	if u.arrivals == nil {
		return false, false
	}
	n := u.state.Load()>>2 + 1
	u.state.Store(n<<2 | unreadRunning)
	if !u.arrivals.OnArrival(u.arrived) {
		u.state.Store(n<<2 | unreadOff)
		return false, false
	}
	st.unread = n
	u.l.adm.run(st)
	u.answered(n)
	// Ended by answered, the state stays so: only a reader moves it,
	// and after a hand-off the next reader's runs have other numbers.
	return true, u.state.Load() == n<<2|unreadOff
}

// answered ends run n's unread time once its call's response is sent (or
// the call is done): the reader is about to read again, and a request that
// comes now (the client's next, at once on a fast link) is no reason to
// hand on. Only run n's reader calls it.
func (u *unreadTurn) answered(n uint64) {
	if u.state.CompareAndSwap(n<<2|unreadRunning, n<<2|unreadOff) {
		u.arrivals.OnArrival(nil)
	}
}

// handOn is the transport's arrival callback: while the reader runs a call,
// the reading goes to an idle worker, or else to a goroutine of its own
// that becomes a worker when the connection's reading leaves it, as the
// connection's first reader does. It never blocks.
func (u *unreadTurn) handOn() {
	for {
		s := u.state.Load()
		if s&3 != unreadRunning {
			return // the reader reads on already
		}
		if u.state.CompareAndSwap(s, s&^3|unreadHanded) {
			break
		}
	}
	if !u.l.s.workers.read(u.l) {
		go u.l.readOn()
	}
}
