package rpc

import "github.com/rdmarpc/rdmarpc/rpc/internal/conn"

// IdleChecks is how many times cc's idle timer has looked, for tests
// that wait for it to look while a call is in progress.
func IdleChecks(cc *ClientConn) int64 { return cc.idleChecks.Load() }

// IdleWorkers is how many of s's workers wait for a job.
func IdleWorkers(s *Server) int {
	s.workers.mu.Lock()
	defer s.workers.mu.Unlock()
	return len(s.workers.idle)
}

// ReadHandoffs is how many times a reader of s handed the reading of its
// connection to an idle worker.
func ReadHandoffs(s *Server) uint64 {
	s.workers.mu.Lock()
	defer s.workers.mu.Unlock()
	return s.workers.handed
}

// ResponseHandoffs is how many responses cc's links delivered to their
// caller from another goroutine (the reader goroutine, or another caller
// holding the read turn).
func ResponseHandoffs(cc *ClientConn) uint64 {
	var n uint64
	cc.forLinks(func(l *clientLink) { n += l.handoffs.Load() })
	return n
}

// ReadTurn says who holds the read turn of cc's link and how many callers
// wait for it: "reader", "caller", "free", "idle" (free, the reader
// goroutine parked until a frame arrives), or "" without a link.
func ReadTurn(cc *ClientConn) (holder string, waiting int) {
	cc.forLinks(func(l *clientLink) {
		l.mu.Lock()
		defer l.mu.Unlock()
		h, idle, n := l.turn.StateLocked()
		holder = [...]string{conn.TurnReader: "reader", conn.TurnFree: "free", conn.TurnCaller: "caller"}[h]
		if idle {
			holder = "idle"
		}
		waiting = n
	})
	return holder, waiting
}

func (cc *ClientConn) forLinks(f func(*clientLink)) {
	cc.mu.Lock()
	var links []*clientLink
	for l := range cc.all {
		links = append(links, l)
	}
	cc.mu.Unlock()
	for _, l := range links {
		f(l)
	}
}

// FramesReceived is how many frames cc's links received.
func FramesReceived(cc *ClientConn) uint64 {
	var n uint64
	cc.forLinks(func(l *clientLink) { n += l.Frames() })
	return n
}

// StepAsides is how many times the reader goroutines of cc's links gave
// the read turn to a caller from Recv.
func StepAsides(cc *ClientConn) uint64 {
	var n uint64
	cc.forLinks(func(l *clientLink) { n += l.turn.StepAsides() })
	return n
}

// ConnCredit is the connection window cc's links may still send into,
// summed.
func ConnCredit(cc *ClientConn) int64 {
	var n int64
	cc.forLinks(func(l *clientLink) {
		n += l.Flow.Credit()
	})
	return n
}

// RunningCalls is how many unary calls s's connections run.
func RunningCalls(s *Server) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for l := range s.conns {
		l.adm.mu.Lock()
		n += int64(l.adm.running)
		l.adm.mu.Unlock()
	}
	return n
}

// SetUnaryEndedHook calls f, until the test ends, each time a unary call
// has left its connection's calls and its response is not yet sent, with
// whether a draining connection could be closed then.
func SetUnaryEndedHook(t interface{ Cleanup(func()) }, f func(closable bool)) {
	testHookUnaryEnded.Store(&f)
	t.Cleanup(func() { testHookUnaryEnded.Store(nil) })
}

// Settled reports whether every connection of s is draining and settled:
// the PING after its GOAWAY came back, or its keepalive timeout passed.
func Settled(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.conns {
		if !l.timers.settled.Load() {
			return false
		}
	}
	return len(s.conns) > 0
}

// StreamHandoffs is how many stream messages cc's links delivered to their
// receiver from another goroutine (the reader goroutine, or a caller
// holding the read turn).
func StreamHandoffs(cc *ClientConn) uint64 {
	var n uint64
	cc.forLinks(func(l *clientLink) { n += l.streamHandoffs.Load() })
	return n
}

// ServerStreamHandoffs is how many stream messages s's connections gave
// their handler from another goroutine (a reader, not the handler reading
// for itself).
func ServerStreamHandoffs(s *Server) uint64 {
	return sumConns(s, func(l *serverLink) uint64 { return l.streamHandoffs.Load() })
}

// sumConns sums f over s's connections.
func sumConns(s *Server, f func(*serverLink) uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for l := range s.conns {
		n += f(l)
	}
	return n
}

// ServerOwnReaders is how many of s's stream handlers read their
// connection for themselves now.
func ServerOwnReaders(s *Server) int {
	return int(sumConns(s, func(l *serverLink) uint64 { return uint64(l.ownReading.Load()) }))
}
