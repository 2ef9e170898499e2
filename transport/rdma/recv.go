package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// receiver is the receive side of a connection: delivered messages, the
// receive buffers and the ledger of credits owed. Its methods take rmu;
// they call nothing that takes another connection lock (rmu is last in the
// order but for the leaves: the transport's counters, the pool's).
type receiver struct {
	rmu          sync.Mutex
	led          *credit.Ledger
	queue        []transport.Buffer // delivered, waiting for Recv
	queued       int                // bytes of reassembled messages in queue
	deferred     []int32            // receive buffers whose re-post waits for queue room
	unposted     []int32            // released receive buffers waiting to be posted in a batch
	spare        []int32            // a slice for taking unposted ones, reused
	releaseBatch int
	// holdCredits: the turn's holder is releasing a message to answer it
	// (TryReply); a repost meanwhile leaves the credit-only message to it.
	holdCredits atomic.Bool
	detached    bool          // left the shared pool (teardown): reposts give commitments back
	asked       bool          // a pool buffer is set aside for the answer to our ask (answer.go)
	orphans     []int32       // shared buffers dropped from the queue at teardown, to post again
	rdone       bool          // nothing more will be delivered
	rwake       notifier      // a message delivered, or the end
	arrival     func()        // OnArrival's: called once at the next delivery or the end
	exhaustedAt time.Duration // since epoch, when the peer last used the guaranteed window up (lendLocked)
	// asm reassembles fragmented messages: written by the completion
	// handler (pmu held) under rmu, and by the teardown's reset; read
	// under either.
	asm reassembler
	// rndv is the receive side of the rendezvous (rendezvous.go).
	rndv   rndvRecv
	rndvOn bool  // both sides offered rendezvous (featRndv)
	self   *conn // for the owners of rendezvous buffers

	recvOutstanding atomic.Int32 // receives posted and not yet completed (atomic: the teardown waits on it)

	// Set when the connection is made (lends by connect, before start).
	epoch      time.Time     // the connection's clock origin (lends; completions time round trips with it)
	rq         *recvQueue    // where the buffers are and receives are posted (recvq.go)
	pool       *srqPool      // the device's shared receive queue, or nil: receives of its own
	recvMR     *verbs.MR     // (RecvBuffers + credit.Extra) buffers of BufferSize; nil with pool
	queueBytes int           // Options.RecvQueueBytes
	maxWindow  int           // Options.RecvBuffers: the most a lent window grows to
	lends      bool          // the peer understands lent credits (featLend)
	answers    bool          // both sides understand asks and answers (featAnswer)
	owner      recvBuffer    // the owner of the messages lent in place
	lentCount  *atomic.Int32 // the life's lentBufs
	onMessage  func()        // a whole message was delivered (completions: the round trip)
	ctr        *counters
	log        *zap.Logger
}

func (c *conn) Recv(ctx context.Context) (transport.Buffer, error) {
	for {
		b, repost, w, ended, replyDue, err := c.next(ctx, c.local)
		switch {
		case ended:
			return transport.Buffer{}, c.closeErr()
		case err != nil:
			return transport.Buffer{}, err
		case w == nil:
			c.repost(repost)
			if replyDue {
				c.reply(kindRndvDone)
			}
			c.t.counters.received.Add(1)
			return b, nil
		}
		err = c.await(ctx, w, c.local, true)
		c.forgetArrival(w)
		if err != nil {
			return transport.Buffer{}, err
		}
	}
}

// next is Recv's look at the receive side: the next delivered message,
// with the deferred receive buffers its taking lets go again (repost); or,
// when there is none yet, w to wait on, registered before rmu is dropped so
// that no delivery is missed; ended: the connection was closed locally or
// nothing more will be delivered.
// replyDue: a rendezvous reply deferred for the queue to shrink is due.
func (r *receiver) next(ctx context.Context, local <-chan struct{}) (b transport.Buffer, repost []int32, w chan struct{}, ended, replyDue bool, err error) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if closedChan(local) {
		return b, nil, nil, true, false, nil
	}
	if len(r.queue) > 0 {
		b = r.queue[0]
		n := copy(r.queue, r.queue[1:])
		r.queue[n] = transport.Buffer{}
		r.queue = r.queue[:n]
		if !b.Owned(r.owner) {
			r.queued -= b.Len()
			if r.queued < r.queueBytes {
				repost, r.deferred = r.deferred, nil
			}
			replyDue = r.takeDoneOwedLocked()
		}
		return b, repost, nil, false, replyDue, nil
	}
	if r.rdone {
		return b, nil, nil, true, false, nil
	}
	// Before polling: a woken waiter whose ctx ended meanwhile gives up
	// rather than spin for a reply (an RPC reader asked to step aside for
	// the caller, when the caller's send roused it).
	if err := ctx.Err(); err != nil {
		return b, nil, nil, false, false, err
	}
	return b, nil, r.rwake.wait(), false, false, nil
}

// forgetArrival ends a wait that next began.
func (r *receiver) forgetArrival(w chan struct{}) {
	r.rmu.Lock()
	r.rwake.forget(w)
	r.rmu.Unlock()
}

// rouse wakes a Recv that sleeps while no message waits for it
// (rouseReceiver).
func (r *receiver) rouse() {
	r.rmu.Lock()
	if len(r.queue) == 0 {
		r.rwake.signal()
	}
	r.rmu.Unlock()
}

// deliverLocked queues a received message for Recv. Called with rmu held.
func (r *receiver) deliverLocked(b transport.Buffer) {
	r.queue = append(r.queue, b)
	r.wakeReadersLocked()
}

// wakeReadersLocked wakes the Recvs waiting, and the OnArrival callback:
// a message was delivered, or nothing more will be. Called with rmu held.
func (r *receiver) wakeReadersLocked() {
	r.rwake.broadcast()
	if f := r.arrival; f != nil {
		r.arrival = nil
		f()
	}
}

// OnArrival implements transport.Arrivals: f runs on whichever goroutine
// delivers the next message (a Recv polling for its own, the poller),
// with rmu held.
func (r *receiver) OnArrival(f func()) bool {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if f != nil && (len(r.queue) > 0 || r.rdone) {
		r.arrival = nil
		return false
	}
	r.arrival = f
	return true
}

// errRecvDone is why a message that completes after the receive side was
// marked done is dropped.
var errRecvDone = errors.New("the receive side is done")

// accept takes what arrived in receive buffer buf (wc's), of kind k with
// the lend field back: a give-back takes back the credits it returns; an
// abort ends the message being reassembled; a message is delivered, whole
// in place or reassembled from its fragments. It reports whether buf can
// be posted again now. Called by the completion handler, holding the
// queue's pmu.
//
// A rendezvous message is checked and its descriptor returned (read) for
// the caller to act on without rmu.
func (r *receiver) accept(wc *verbs.WorkCompletion, buf int32, k kind, back int) (repost bool, rv rndvEvent, err error) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.rdone {
		// The teardown's final drain found a message that completed
		// after its last poll: the receive side is done (after a local
		// Close its queue is already dropped), so nobody would Recv it.
		// Drop it here, never lent or queued; its buffer is not posted
		// again (a shared one goes back to the pool's queue).
		r.postLost(wc)
		return false, rv, errRecvDone
	}
	if k == kindAnswer {
		// Into the buffer our ask set aside: it takes no credit.
		if err := r.answerArrived(); err != nil {
			return false, rv, err
		}
	} else if err := r.led.Arrived(); err != nil {
		return false, rv, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
	}
	if k == kindGiveBack {
		if wc.ByteLen != 0 {
			return false, rv, protoErr("give-back with %d bytes of payload", wc.ByteLen)
		}
		freed, err := r.led.TakeBack(back)
		if err != nil {
			return false, rv, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
		}
		if r.pool != nil {
			r.pool.release(freed)
		}
		return true, rv, nil
	}
	if k != kindAnswer {
		r.lendLocked()
	}
	data := r.rq.bytes(buf, int(wc.ByteLen))
	switch k {
	case kindAbort:
		if wc.ByteLen != 0 {
			return false, rv, protoErr("abort with %d bytes of payload", wc.ByteLen)
		}
		if err := r.asm.abort(); err != nil {
			return false, rv, err
		}
		return true, rv, nil
	case kindRndv, kindRndvDone, kindRndvRefused:
		if !r.rndvOn {
			return false, rv, protoErr("a %v from a peer that did not offer rendezvous", k)
		}
		d, read, err := r.acceptRndvLocked(k, data)
		if err != nil {
			return false, rv, err
		}
		rv = rndvEvent{k: k, desc: d, read: read}
		return true, rv, nil
	case kindMessage, kindAsk, kindAnswer:
		if err := r.asm.wholeAllowed(); err != nil {
			return false, rv, err
		}
		id := uint64(buf)
		switch k {
		case kindAsk:
			if err := r.self.askArrived(); err != nil {
				return false, rv, err
			}
		case kindAnswer:
			id |= answerTag // its release gives the buffer set aside back
		}
		// Handed up in place: the registered memory stays mapped until
		// the user releases it, even if the connection closes first.
		r.lentCount.Add(1)
		r.deliverLocked(transport.NewBuffer(data, r.owner, id))
		r.onMessage()
		return false, rv, nil
	}
	msg, err := r.asm.fragment(k, data)
	if err != nil {
		return false, rv, err
	}
	if msg != nil {
		r.queued += len(msg)
		r.deliverLocked(transport.NewBuffer(msg, heapRecv{}, 0))
		r.onMessage()
	}
	// The fragment is copied out: its buffer can go back, unless too much
	// reassembled data waits for Recv.
	if r.queued >= r.queueBytes {
		r.deferred = append(r.deferred, buf)
		return false, rv, nil
	}
	return true, rv, nil
}

// repost posts data receive buffers again and owes the peer their credits.
// A shared pool's buffers are posted even after teardown (they are the
// pool's); once the connection has left the pool, their commitment goes
// back to it instead of a credit to the peer.
func (c *conn) repost(bufs []int32) {
	var batch [16]verbs.RecvWR // on the stack: no allocation per message
	for len(bufs) > 0 {
		wrs := batch[:0]
		for len(bufs) > 0 && len(wrs) < len(batch) {
			wrs = append(wrs, c.rq.wr(bufs[0]))
			bufs = bufs[1:]
		}
		err := c.rq.post(wrs)
		if errors.Is(err, errRecvStopped) {
			return // its own receive queue, stopped by the teardown
		}
		if err != nil {
			if !c.sig.IsSet() {
				c.fail(fmt.Errorf("re-posting receives: %w", err))
			}
			return
		}
		c.t.counters.recvsPosted.Add(uint64(len(wrs)))
		c.reposted(len(wrs))
	}
	if !c.holdCredits.Load() && c.creditsDue() {
		c.sendCreditOnly()
	}
}

// reposted owes the peer the credits of n receive buffers posted again,
// or, once the connection left the pool, gives their commitment back.
func (r *receiver) reposted(n int) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.detached {
		r.pool.release(n)
		return
	}
	for range n {
		r.led.Reposted()
	}
}

// creditsDue reports whether enough credits are owed to return them in a
// credit-only message.
func (r *receiver) creditsDue() bool {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return !r.detached && r.led.Owed() >= r.led.Threshold()
}

// released takes back a whole message's receive buffer. Buffers are posted
// again in batches of up to releaseBatch (one doorbell, one cgo call for
// several); the poller flushes a smaller batch whenever it runs. A batch is
// small enough that the credits it holds back can never be what the peer
// waits for (Ledger.PostBatch): nothing may come to run the poller.
func (c *conn) released(buf int32) {
	if flush := c.batchReleased(buf); flush != nil {
		c.repost(flush)
		c.giveBack(flush)
	}
}

// batchReleased adds a released buffer to the batch waiting to be posted
// again, and takes the batch when it is full.
func (r *receiver) batchReleased(buf int32) []int32 {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.unposted = append(r.unposted, buf)
	limit := r.releaseBatch
	if r.pool != nil {
		// The window changes: a quarter of it as it is now. Once the
		// connection left the pool nothing else would post the batch.
		limit = r.led.Recvs() / 4
		if r.detached {
			limit = 1
		}
	}
	if len(r.unposted) >= r.led.PostBatch(limit) {
		return r.takeUnpostedLocked()
	}
	return nil
}

// takeUnpostedLocked takes the buffers waiting to be posted again, into a
// slice from the pool of such slices. Called with rmu held.
func (r *receiver) takeUnpostedLocked() []int32 {
	if len(r.unposted) == 0 {
		return nil
	}
	out := r.spare
	r.spare = nil
	out = append(out[:0], r.unposted...)
	r.unposted = r.unposted[:0]
	return out
}

// takeUnposted is takeUnpostedLocked for a caller without rmu.
func (r *receiver) takeUnposted() []int32 {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.takeUnpostedLocked()
}

// giveBack returns a slice from takeUnpostedLocked for reuse.
func (r *receiver) giveBack(s []int32) {
	r.rmu.Lock()
	r.spare = s[:0]
	r.rmu.Unlock()
}

// flushUnposted posts again whatever released buffers wait.
func (c *conn) flushUnposted() {
	if flush := c.takeUnposted(); flush != nil {
		c.repost(flush)
		c.giveBack(flush)
	}
}

// recvBuffer owns whole messages handed up in their receive buffer.
type recvBuffer struct{ c *conn }

func (o recvBuffer) ReleaseBuffer(id uint64, _ []byte) {
	if id&answerTag != 0 {
		o.c.releasedAnswer(int32(id))
	} else {
		o.c.released(int32(id))
	}
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

// postControl posts a control receive again at once (it takes no part in
// the credit accounting).
func (c *conn) postControl(buf int32) error {
	if err := c.rq.post([]verbs.RecvWR{c.rq.wr(buf)}); errors.Is(err, errRecvStopped) {
		return nil
	} else if err != nil {
		return fmt.Errorf("re-posting a control receive: %w", err)
	}
	c.t.counters.recvsPosted.Add(1)
	return nil
}

// endRecvs marks the receive side done once the QP went to ERR: the
// reassembly is dropped and the waiters woken; with local (a local Close)
// the delivered messages nobody will Recv are dropped too, and it returns
// how many of those were lent receive buffers.
func (r *receiver) endRecvs(local bool) (lent int) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	r.rdone = true
	r.asm.reset()
	r.wakeReadersLocked()
	if local {
		lent = r.dropQueueLocked()
	}
	return lent
}

// dropQueue is dropQueueLocked for a caller without rmu.
func (r *receiver) dropQueue() int {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.dropQueueLocked()
}

// dropQueueLocked releases the messages delivered and not received and
// returns how many of them were lent receive buffers, for the caller to
// unlend (a receive buffer is not posted again now, its memory just stops
// being lent). Called with rmu held.
func (r *receiver) dropQueueLocked() int {
	lent := 0
	for i := range r.queue {
		if r.queue[i].Owned(r.owner) {
			lent++
			if r.pool != nil { // the pool's: posted again by repostOrphans
				r.orphans = append(r.orphans, int32(r.queue[i].ID()))
			}
		} else {
			r.queue[i].Release()
		}
	}
	r.queue = nil
	return lent
}

// postLost takes back the buffer of a receive that failed or was
// flushed: it never arrived, so no credit is owed for it (a shared one
// goes back on the pool's queue).
func (r *receiver) postLost(wc *verbs.WorkCompletion) {
	r.rq.lost(int32(wc.ID &^ recvTag))
}

// takenLost puts back a shared receive that a connection which never
// started took (its handshake failed), and counts it taken.
func (r *receiver) takenLost(wc *verbs.WorkCompletion) {
	if r.pool != nil {
		r.pool.taken.Add(1)
	}
	r.postLost(wc)
}

// foldTaken adds the shared receives the connection's completions took
// from the pool's SRQ (recvOutstanding only goes below zero with a pool)
// to the pool's count, once no completion of its can come any more.
func (r *receiver) foldTaken() {
	if r.pool != nil {
		r.pool.taken.Add(-int64(r.recvOutstanding.Swap(0)))
	}
}
