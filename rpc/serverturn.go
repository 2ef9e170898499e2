package rpc

import "github.com/rdmarpc/rdmarpc/rpc/internal/conn"

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
// done, as after a hand-off up front. The run numbers and the arrival
// callback are conn.Unread's.
type unreadTurn struct {
	l *serverLink
	conn.Unread
}

func (u *unreadTurn) init(l *serverLink) {
	u.l = l
	u.Init(l.Conn, u.handOn)
}

// run runs st on the reader unless a message is waiting already (ran
// false: nothing was done). reading reports whether the caller still holds
// the reading; if not, it was handed on while st ran.
func (u *unreadTurn) run(st *callStream) (ran, reading bool) {
	n, ok := u.Start()
	if !ok {
		return false, false
	}
	st.unread = n
	u.l.adm.run(st)
	u.Answered(n)
	return true, u.Reading(n)
}

// handOn hands the reading, while the reader runs a call, to an idle
// worker, or else to a goroutine of its own that becomes a worker when the
// connection's reading leaves it, as the connection's first reader does.
// It never blocks.
func (u *unreadTurn) handOn() {
	if !u.l.s.workers.read(u.l) {
		go u.l.readOn()
	}
}
