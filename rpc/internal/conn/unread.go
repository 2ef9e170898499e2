package conn

import (
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/transport"
)

// Unread is a server connection's unread time: its reader runs a call it
// read without first handing the reading on, and the first message to
// arrive meanwhile (or the connection's end) hands the reading on at once,
// from the transport's goroutine (HandOn). Only a transport that reports
// arrivals (transport.Arrivals) allows it: the reader must never stop
// reading for long. The rpc package decides when a call runs so
// (rpc/serverturn.go says why) and what handing on is.
//
// Each run has a number, so that a reader that was handed on, still
// answering its call, cannot end the next reader's run.
type Unread struct {
	arrivals transport.Arrivals // nil: the transport does not report them, always hand on
	// state is a run's number (state>>2) and its phase (state&3).
	state   atomic.Uint64
	handOn  func()
	arrived func() // u.arrive, made once: OnArrival per call allocates nothing
}

// The phases of a run (state&3); state 0, before the first run, is none.
const (
	unreadOff     = 1 + iota // the reader reads
	unreadRunning            // the reader runs a call; nobody reads
	unreadHanded             // something arrived meanwhile: the reading was handed on
)

// Init readies u for the connection tc; handOn hands the reading on (to a
// worker, or a goroutine of its own). It must not block: it runs on the
// transport's goroutine.
func (u *Unread) Init(tc transport.Conn, handOn func()) {
	u.arrivals, _ = tc.(transport.Arrivals)
	u.handOn = handOn
	u.arrived = u.arrive
}

// Start begins run n, the reader about to run a call unread, unless the
// transport does not report arrivals or a message is waiting already (ok
// false: nothing was done, hand on).
func (u *Unread) Start() (n uint64, ok bool) {
	if u.arrivals == nil {
		return 0, false
	}
	n = u.state.Load()>>2 + 1
	u.state.Store(n<<2 | unreadRunning)
	if !u.arrivals.OnArrival(u.arrived) {
		u.state.Store(n<<2 | unreadOff)
		return 0, false
	}
	return n, true
}

// Answered ends run n's unread time once its call's response is sent (or
// the call is done): the reader is about to read again, and a request that
// comes now (the client's next, at once on a fast link) is no reason to
// hand on. Only run n's reader calls it.
func (u *Unread) Answered(n uint64) {
	if u.state.CompareAndSwap(n<<2|unreadRunning, n<<2|unreadOff) {
		u.arrivals.OnArrival(nil)
	}
}

// Reading reports, after run n was answered, whether its reader still
// holds the reading; if not, it was handed on while the call ran. Ended by
// Answered, the state stays so: only a reader moves it, and after a
// hand-off the next reader's runs have other numbers.
func (u *Unread) Reading(n uint64) bool { return u.state.Load() == n<<2|unreadOff }

// arrive is the transport's arrival callback: while the reader runs a
// call, the reading is handed on. It never blocks.
func (u *Unread) arrive() {
	for {
		s := u.state.Load()
		if s&3 != unreadRunning {
			return // the reader reads on already
		}
		if u.state.CompareAndSwap(s, s&^3|unreadHanded) {
			break
		}
	}
	u.handOn()
}
