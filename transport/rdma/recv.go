package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// receiver is the receive side of a connection: delivered messages and
// the ledger of credits owed, guarded by rmu.
type receiver struct {
	rmu          sync.Mutex
	led          *credit.Ledger
	queue        []transport.Buffer // delivered, waiting for Recv
	queued       int                // bytes of reassembled messages in queue
	deferred     []int32            // receive buffers whose re-post waits for queue room
	unposted     []int32            // released receive buffers waiting to be posted in a batch
	spare        []int32            // a slice for taking unposted ones, reused
	releaseBatch int
	detached     bool          // left the shared pool (teardown): reposts give commitments back
	orphans      []int32       // shared buffers dropped from the queue at teardown, to post again
	rdone        bool          // nothing more will be delivered
	rstop        bool          // the QP is going to ERR: its own receive queue takes no more posts
	rwake        notifier      // a message delivered, or the end
	arrival      func()        // OnArrival's: called once at the next delivery or the end
	exhaustedAt  time.Duration // since epoch, when the peer last used the guaranteed window up (lendLocked)
}

func (c *conn) Recv(ctx context.Context) (transport.Buffer, error) {
	for {
		c.rmu.Lock()
		select {
		case <-c.local:
			c.rmu.Unlock()
			return transport.Buffer{}, c.closeErr()
		default:
		}
		if len(c.queue) > 0 {
			b := c.queue[0]
			n := copy(c.queue, c.queue[1:])
			c.queue[n] = transport.Buffer{}
			c.queue = c.queue[:n]
			var repost []int32
			if !b.Owned(recvBuffer{c}) {
				c.queued -= b.Len()
				if c.queued < c.o.RecvQueueBytes {
					repost, c.deferred = c.deferred, nil
				}
			}
			c.rmu.Unlock()
			if len(repost) > 0 {
				c.repost(repost)
			}
			c.t.counters.received.Add(1)
			return b, nil
		}
		if c.rdone {
			c.rmu.Unlock()
			return transport.Buffer{}, c.closeErr()
		}
		// Before polling: a woken waiter whose ctx ended meanwhile gives
		// up rather than spin for a reply (an RPC reader asked to step
		// aside for the caller, when the caller's send roused it).
		if err := ctx.Err(); err != nil {
			c.rmu.Unlock()
			return transport.Buffer{}, err
		}
		w := c.rwake.wait()
		c.rmu.Unlock()
		err := c.await(ctx, w, c.local, true)
		c.rmu.Lock()
		c.rwake.forget(w)
		c.rmu.Unlock()
		if err != nil {
			return transport.Buffer{}, err
		}
	}
}

// deliver queues a received message for Recv. Called with rmu held.
func (c *conn) deliverLocked(b transport.Buffer) {
	c.queue = append(c.queue, b)
	c.wakeReadersLocked()
}

// wakeReadersLocked wakes the Recvs waiting, and the OnArrival callback:
// a message was delivered, or nothing more will be. Called with rmu held.
func (c *conn) wakeReadersLocked() {
	c.rwake.broadcast()
	if f := c.arrival; f != nil {
		c.arrival = nil
		f()
	}
}

// OnArrival implements transport.Arrivals: f runs on whichever goroutine
// delivers the next message (a Recv polling for its own, the poller),
// with rmu held.
func (c *conn) OnArrival(f func()) bool {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if f != nil && (len(c.queue) > 0 || c.rdone) {
		c.arrival = nil
		return false
	}
	c.arrival = f
	return true
}

// repost posts data receive buffers again and owes the peer their credits.
// A shared pool's buffers are posted even after teardown (they are the
// pool's); once the connection has left the pool, their commitment goes
// back to it instead of a credit to the peer.
func (c *conn) repost(bufs []int32) {
	if len(bufs) == 0 || c.pool == nil && c.torndown.Load() {
		return
	}
	var batch [16]verbs.RecvWR // on the stack: no allocation per message
	for len(bufs) > 0 {
		wrs := batch[:0]
		for len(bufs) > 0 && len(wrs) < len(batch) {
			wrs = append(wrs, c.recvWR(bufs[0]))
			bufs = bufs[1:]
		}
		var err error
		if c.pool != nil {
			err = c.pool.postRecv(wrs)
		} else if err = c.postOwn(wrs); errors.Is(err, errRecvStopped) {
			return
		}
		if err != nil {
			if !c.sig.IsSet() {
				c.fail(fmt.Errorf("re-posting receives: %w", err))
			}
			return
		}
		c.t.counters.recvsPosted.Add(uint64(len(wrs)))
		c.rmu.Lock()
		if c.detached {
			c.pool.release(len(wrs))
		} else {
			for range wrs {
				c.led.Reposted()
			}
		}
		c.rmu.Unlock()
	}
	c.rmu.Lock()
	enough := !c.detached && c.led.Owed() >= c.led.Threshold()
	c.rmu.Unlock()
	if enough {
		c.sendCreditOnly()
	}
}

// released takes back a whole message's receive buffer. Buffers are posted
// again in batches of up to releaseBatch (one doorbell, one cgo call for
// several); the poller flushes a smaller batch whenever it runs. A batch is
// small enough that the credits it holds back can never be what the peer
// waits for (Ledger.PostBatch): nothing may come to run the poller.
func (c *conn) released(buf int32) {
	c.rmu.Lock()
	c.unposted = append(c.unposted, buf)
	limit := c.releaseBatch
	if c.pool != nil {
		// The window changes: a quarter of it as it is now. Once the
		// connection left the pool nothing else would post the batch.
		limit = c.led.Recvs() / 4
		if c.detached {
			limit = 1
		}
	}
	batch := c.led.PostBatch(limit)
	var flush []int32
	if len(c.unposted) >= batch {
		flush = c.takeUnpostedLocked()
	}
	c.rmu.Unlock()
	c.repost(flush)
	if flush != nil {
		c.giveBack(flush)
	}
}

// takeUnpostedLocked takes the buffers waiting to be posted again, into a
// slice from the pool of such slices. Called with rmu held.
func (c *conn) takeUnpostedLocked() []int32 {
	if len(c.unposted) == 0 {
		return nil
	}
	out := c.spare
	c.spare = nil
	out = append(out[:0], c.unposted...)
	c.unposted = c.unposted[:0]
	return out
}

// giveBack returns a slice from takeUnpostedLocked for reuse.
func (c *conn) giveBack(s []int32) {
	c.rmu.Lock()
	c.spare = s[:0]
	c.rmu.Unlock()
}

// flushUnposted posts again whatever released buffers wait.
func (c *conn) flushUnposted() {
	c.rmu.Lock()
	flush := c.takeUnpostedLocked()
	c.rmu.Unlock()
	if flush != nil {
		c.repost(flush)
		c.giveBack(flush)
	}
}

// recvBuffer owns whole messages handed up in their receive buffer.
type recvBuffer struct{ c *conn }

func (o recvBuffer) ReleaseBuffer(id uint64, _ []byte) {
	o.c.released(int32(id))
	o.c.unlend()
}

// heapRecv owns reassembled messages (Go memory, not registered).
type heapRecv struct{}

func (heapRecv) ReleaseBuffer(_ uint64, b []byte) { bufpool.Put(b) }

// unlend records lent memory coming back; after teardown the last one frees
// the registered memory.
func (c *conn) unlend() {
	if c.lentBufs.Add(-1) == 0 && c.torndown.Load() {
		c.freeMemory()
	}
}

// recvTag marks the ids of receive work requests; sends use sequence
// numbers below it. A failed completion's opcode is undefined, its id is not.
const recvTag = 1 << 63

func isRecv(wc *verbs.WorkCompletion) bool { return wc.ID&recvTag != 0 }

func (c *conn) recvWR(i int32) verbs.RecvWR {
	if c.pool != nil {
		return c.pool.wr(i)
	}
	return verbs.RecvWR{ID: recvTag | uint64(i), MR: c.recvMR, Offset: uint32(int(i) * c.o.BufferSize), Length: uint32(c.o.BufferSize)}
}

// postControl posts a control receive again at once (it takes no part in
// the credit accounting).
func (c *conn) postControl(buf int32) error {
	if c.pool != nil {
		return c.pool.post([]int32{buf})
	}
	if err := c.postOwn([]verbs.RecvWR{c.recvWR(buf)}); errors.Is(err, errRecvStopped) {
		return nil
	} else if err != nil {
		return fmt.Errorf("re-posting a control receive: %w", err)
	}
	c.t.counters.recvsPosted.Add(1)
	return nil
}

// errRecvStopped: the QP is going to ERR, a receive is not posted again.
var errRecvStopped = errors.New("the receive queue is stopped")

// postOwn posts receives on the connection's own receive queue, counted
// as outstanding before they can complete, unless the teardown stopped it:
// rxe flushes a receive queue when its QP enters ERR, not a receive posted
// after that, which would never complete and hold the teardown for its
// whole grace period (and, on a shared CQ, its place for good).
func (c *conn) postOwn(wrs []verbs.RecvWR) error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rstop {
		return errRecvStopped
	}
	c.recvOutstanding.Add(int32(len(wrs)))
	if err := c.qp.PostRecv(wrs); err != nil {
		c.recvOutstanding.Add(-int32(len(wrs)))
		return err
	}
	return nil
}

// stopRecvs stops the connection's own receive queue, before its QP goes
// to ERR.
func (c *conn) stopRecvs() {
	c.rmu.Lock()
	c.rstop = true
	c.rmu.Unlock()
}

// recvBytes is the memory of receive buffer buf, n bytes of it.
func (c *conn) recvBytes(buf int32, n int) []byte {
	if c.pool != nil {
		return c.pool.bytes(buf)[:n]
	}
	off := int(buf) * c.o.BufferSize
	return c.recvMR.Bytes()[off : off+n]
}

// postLost puts back on the shared queue a buffer that a failed or flushed
// receive took: it never arrived, so no credit is owed for it.
func (c *conn) postLost(wc *verbs.WorkCompletion) {
	if c.pool != nil {
		if err := c.pool.post([]int32{int32(wc.ID &^ recvTag)}); err != nil {
			c.log.Debug("re-posting a flushed shared receive", zap.Error(err))
		}
	}
}
