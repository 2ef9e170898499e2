package rdma

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// life is the life cycle of a connection: why and when it closes, and
// the memory it lent out.
type life struct {
	sig       signal.Signal // set, with the reason, when the connection starts closing
	closing   atomic.Bool   // sig is set (read on every spin: no lock)
	local     chan struct{} // closed by a local Close
	closed    chan struct{} // closed when teardown is complete
	lentBufs  atomic.Int32  // memory lent to users (received messages, send slots)
	freeOnce  sync.Once
	torndown  atomic.Bool
	watchDone chan struct{} // closed when the watcher has returned
	peerGone  chan struct{} // closed when the bootstrap connection ended

	tdWake     chan struct{} // some of its completions were handled while closing
	destroying atomic.Bool   // destroy: a handshake failed, it never started

	// beforeERR, set only by tests, runs in the teardown between its last
	// poll and moving the QP to ERR: the window a late completion falls in.
	beforeERR func()
	// afterERR, set only by tests, runs in the teardown right after the
	// QP went to ERR, before the final drain.
	afterERR atomic.Pointer[func()]
	// peerGoneHook, set only by tests, runs in the watcher once the
	// bootstrap connection ended, before it fails the connection.
	peerGoneHook atomic.Pointer[func()]
}

// watch waits for the bootstrap TCP connection to end: the peer closed, or
// died. Nothing is ever sent on it after the handshake.
func (c *conn) watch() {
	defer close(c.watchDone)
	var b [1]byte
	_, err := c.boot.Read(b[:])
	close(c.peerGone)
	if h := c.peerGoneHook.Load(); h != nil {
		(*h)()
	}
	switch {
	case c.sig.IsSet():
	case err == nil:
		c.fail(protoErr("unexpected data on the bootstrap connection"))
	case errors.Is(err, io.EOF) && c.readInFlight():
		// A read with a key the peer does not honour fails at both ends
		// (rxe moves the responder's queue pair to ERR too): the peer
		// may close before this side's read completes with its error.
		c.fail(errors.New("rdma: connection closed by peer during a rendezvous read of its region"))
	case errors.Is(err, io.EOF):
		c.fail(errors.New("rdma: connection closed by peer"))
	default:
		c.fail(fmt.Errorf("rdma: bootstrap connection lost: %w", err))
	}
}

// gone reports whether the bootstrap connection ended: the peer closed or
// died (or the local teardown closed it), and sends to it may never
// complete.
func (c *conn) gone() bool {
	select {
	case <-c.peerGone:
		return true
	default:
		return false
	}
}

// fail starts closing the connection because of err.
func (c *conn) fail(err error) {
	if c.sig.Set(transport.Closed(err)) {
		c.closing.Store(true)
		c.cqs.wake(c)
	}
}

// closeErr is why the connection closed (nil while it is open).
func (c *conn) closeErr() error { return c.sig.Err() }

// Close closes the connection and waits for its teardown.
func (c *conn) Close() error {
	if c.sig.Set(fmt.Errorf("%w: closed locally", transport.ErrClosed)) {
		close(c.local)
		c.closing.Store(true)
		c.cqs.wake(c)
	}
	<-c.closed
	// After a peer's failure the teardown kept what had arrived for Recv;
	// after Close nobody can Recv it (a local Close's teardown dropped it
	// already).
	lent := c.dropQueue()
	c.repostOrphans() // before the last unlend can close the pool's device
	for range lent {
		c.unlend()
	}
	return nil
}

// teardown runs once the connection is closing, on the goroutine its
// completion layout gives it: it lets posted sends complete (a local Close
// delivers what Send accepted), moves the QP to ERR, drains what is
// flushed, ends the bootstrap connection, and frees the verbs resources —
// registered memory only once users gave back every buffer lent to them.
func (c *conn) teardown() {
	defer close(c.closed)
	l := c.cqs
	deadline := time.Now().Add(c.o.CloseGrace)
	local := closedChan(c.local)
	// Sends already posted: wait for their completions while the peer
	// lives (a local close). A peer that closed first (its end gone
	// before our watcher saw it) acknowledges nothing more, and rxe took
	// longer than a 30 s grace to fail such sends.
	for local && c.pendingSends() && time.Now().Before(deadline) && !c.gone() {
		l.drain(c, deadline, c.peerGone)
	}
	// Only the grace ends that wait with sends still pending and the peer there.
	expired := local && c.pendingSends() && !c.gone()
	// Receives that completed before the close are still delivered.
	l.settle(c)
	if c.beforeERR != nil {
		// Not holding the queue: the test's peer may share it.
		c.beforeERR()
	}
	var lastWQE <-chan struct{}
	if c.pool != nil {
		lastWQE = c.pool.expectLastWQE(c.qp.Num())
	}
	// Held: no completion of c's is being handled while its reassembly
	// is reset and its receive side ends.
	l.hold(c)
	c.rq.stop()
	if err := c.qp.ToError(); err != nil {
		c.log.Debug("moving the queue pair to ERR", zap.Error(err))
	}
	if h := c.afterERR.Load(); h != nil {
		(*h)()
	}
	c.boot.Close()
	// After a local Close nobody will Recv what was delivered: forget it.
	// (Not torn down yet: the check below frees the memory when nothing
	// else is lent.)
	c.lentBufs.Add(-int32(c.endRecvs(local)))
	l.unhold(c)
	// Every work request still posted completes, flushed; wait for them
	// (within the grace period) so none is left when the QP goes.
	for (c.recvOutstanding.Load() > 0 || c.pendingSends()) && time.Now().Before(deadline) {
		if !l.drain(c, deadline, nil) {
			break
		}
	}
	drained := c.recvOutstanding.Load() <= 0 && !c.pendingSends()
	if expired || !drained {
		c.t.counters.closeGraceExpired.Add(1)
	}
	if c.pool != nil {
		// Shared receives are not counted per connection (a receive
		// completion takes one from recvOutstanding either way: with a
		// pool it only goes below zero): one the QP took from the SRQ
		// mid-message is flushed once the device's responder sees ERR
		// (LAST_WQE_REACHED says it did): handle it before the QP goes,
		// or its buffer is lost.
		bound := c.pool.settleBound(deadline)
		for !closedChan(lastWQE) && time.Now().Before(bound) {
			l.drain(c, minTime(bound, time.Now().Add(time.Millisecond)), lastWQE)
		}
		drained = c.pool.lastWQEDone(c.qp.Num(), lastWQE) && drained
	}
	c.leavePool()
	c.torndown.Store(true)
	c.wakeAll()
	<-c.watchDone
	c.dropWindow() // before its queue pair: a bound type 2 window holds it
	l.free(c, drained)
	c.foldTaken()
	if c.lentBufs.Load() == 0 {
		c.freeMemory()
	}
	c.t.counters.connsClosed.Add(1)
}

// closeVerbs frees verbs resources, in the order given (QP before its CQ,
// CQ before its channel).
func (c *conn) closeVerbs(cls ...interface{ Close() error }) {
	for _, cl := range cls {
		if err := cl.Close(); err != nil {
			c.log.Error("freeing verbs resources", zap.Error(err))
		}
	}
}

// closedChan reports whether ch is closed (a nil ch never is).
func closedChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// freeMemory deregisters the receive and send memory, once.
func (c *conn) freeMemory() {
	c.freeOnce.Do(func() {
		c.freeSendMemory()
		for _, mr := range []*verbs.MR{c.recvMR, c.sendMR} {
			if mr != nil {
				if err := mr.Close(); err != nil {
					c.log.Error("deregistering memory", zap.Error(err))
				}
			}
		}
		c.uncharge()
		c.freeRndv()
		c.t.release(c.dev)
	})
}

// handleClosing handles completions during teardown: sends free their
// entries, received messages are still delivered, failures are expected.
func (c *conn) handleClosing(wcs []verbs.WorkCompletion) {
	for i := range wcs {
		wc := &wcs[i]
		switch {
		case wc.Status != verbs.WCSuccess:
			if wc.Status != verbs.WCWRFlushErr {
				c.t.counters.wcError(wc.Status)
			}
			if isRecv(wc) {
				c.recvOutstanding.Add(-1)
				c.postLost(wc)
			} else {
				c.sendCompleted(wc.ID)
			}
		case !isRecv(wc):
			c.sendCompleted(wc.ID)
		default:
			c.recvOutstanding.Add(-1)
			bufs, err := c.received(wc, nil)
			if err != nil {
				c.log.Debug("dropping a message received while closing", zap.Error(err))
			}
			if c.pool != nil {
				// A fragment copied out, a give-back: the pool's buffer
				// goes back on its queue (dropping it lost it for good).
				c.repost(bufs)
			}
		}
	}
}
