package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// ctlHeadroom is how many send-queue entries are kept for credit-only
// messages beyond the send slots (at most credit.Extra are ever in flight).
const ctlHeadroom = credit.Extra + 2

// conn is one RDMA connection: an RC queue pair with its own completion
// queue, registered receive buffers and send slots, and the TCP connection
// of its bootstrap kept open as the liveness signal.
//
// Two goroutines belong to it: the poller, which handles every completion
// (and, when the connection closes, tears it down), and the watcher, which
// waits for the bootstrap connection to end. Close waits for both.
//
// Locks: mu guards the send side (credits, slots, the send queue), rmu the
// receive side (delivered messages, the ledger of credits owed). When both
// are needed, mu is taken first.
type conn struct {
	t    *Transport
	o    *Options
	log  *zap.Logger
	dev  *device
	boot net.Conn
	peer hello

	ch        *verbs.CompChannel
	cq        *verbs.CQ
	qp        *verbs.QP
	recvMR    *verbs.MR // (RecvBuffers + credit.Extra) buffers of BufferSize
	sendMR    *verbs.MR // SendSlots slots of the peer's buffer size
	maxInline int
	recvs     int   // receive buffers in all
	charged   int64 // bytes of registered memory taken from the budget

	recvOutstanding atomic.Int32  // receives posted and not yet completed
	bytesIn         atomic.Uint64 // payload bytes of every completed receive

	// Completions, handled by whichever goroutine holds pmu: a Recv (or a
	// send waiting for credits or slots) polls the completion queue
	// itself; the poller goroutine handles what comes while nobody does.
	// Whenever pmu is free the queue is armed, so no completion waits for
	// somebody to poll. pl guards armed; lock order pmu, pl, mu, rmu.
	pmu     sync.Mutex
	wcs     []verbs.WorkCompletion // pmu's
	reposts []int32                // pmu's
	pl      sync.Mutex
	armed   bool // the CQ is armed and its event not yet read
	closing atomic.Bool

	// The round trip this connection observes, for how long a waiter
	// polls: a message sent, the next one received.
	epoch   time.Time
	sentAt  atomic.Int64 // since epoch, when the last message left
	expect  atomic.Bool  // a message left and none has arrived since
	bigSend atomic.Bool  // the last message left in fragments: do not spin for its reply
	rtt     atomic.Int64 // moving average of the round trip, ns

	// Send side, guarded by mu.
	mu          sync.Mutex
	win         *credit.Window
	free        []int32        // free send slots
	lent        int            // slots lent by NewSendBuffer
	ring        []posted       // queued and posted sends, in order, until completed
	outbox      []verbs.SendWR // queued, not yet posted
	spareOutbox []verbs.SendWR
	posting     bool   // a flush is posting the outbox
	seq         uint64 // id of the next send
	sqFree      int
	unsignaled  int
	ctlWanted   bool          // a credit-only message waits for send-queue room
	wake        notifier      // credits, slots or send-queue entries freed
	turn        chan struct{} // one message at a time: fragments stay contiguous
	turnWaiters atomic.Int32
	abortOwed   bool // a message was abandoned mid-way; its turn holder sends the abort

	// Receive side, guarded by rmu.
	rmu          sync.Mutex
	led          *credit.Ledger
	queue        []transport.Buffer // delivered, waiting for Recv
	queued       int                // bytes of reassembled messages in queue
	deferred     []int32            // receive buffers whose re-post waits for queue room
	unposted     []int32            // released receive buffers waiting to be posted in a batch
	spare        []int32            // a slice for taking unposted ones, reused
	releaseBatch int
	rdone        bool        // nothing more will be delivered
	rwake        notifier    // a message delivered, or the end
	asm          reassembler // pmu's

	// Life cycle.
	ctx       context.Context // done when the connection starts closing
	cancel    context.CancelFunc
	closeOnce sync.Once
	errMu     sync.Mutex
	err       error
	local     chan struct{} // closed by a local Close
	closed    chan struct{} // closed when teardown is complete
	lentBufs  atomic.Int32  // memory lent to users (received messages, send slots)
	freeOnce  sync.Once
	torndown  atomic.Bool
	watchDone chan struct{} // closed when the watcher has returned
}

// posted is one send on the send queue, in posting order.
type posted struct {
	seq      uint64
	slot     int32 // -1: no slot (credit-only)
	signaled bool
}

// newConn creates the queue pair and its resources and posts every receive;
// the QP is left in INIT. The send side is set up by connect, once the
// peer's hello is known.
func (t *Transport) newConn(dev *device, port uint8, boot net.Conn) (*conn, error) {
	o := &t.o
	c := &conn{
		t:            t,
		o:            o,
		log:          o.Logger.With(zap.Stringer("peer", boot.RemoteAddr())),
		dev:          dev,
		boot:         boot,
		recvs:        o.RecvBuffers + credit.Extra,
		led:          credit.NewLedger(o.RecvBuffers),
		releaseBatch: max(1, o.RecvBuffers/4),
		turn:         make(chan struct{}, 1),
		local:        make(chan struct{}),
		closed:       make(chan struct{}),
		watchDone:    make(chan struct{}),
		asm:          reassembler{max: o.MaxMessageSize},
		wcs:          make([]verbs.WorkCompletion, 32),
		epoch:        time.Now(),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	sqDepth := o.SendSlots + ctlHeadroom
	var err error
	if c.ch, err = dev.ctx.NewCompChannel(); err != nil {
		return nil, err
	}
	if c.cq, err = dev.ctx.CreateCQ(sqDepth+c.recvs+8, c.ch); err != nil {
		c.destroy()
		return nil, err
	}
	c.qp, err = dev.pd.CreateQP(verbs.QPConfig{
		SendCQ: c.cq, RecvCQ: c.cq,
		MaxSendWR: sqDepth, MaxRecvWR: c.recvs,
		MaxInlineData: 128,
	})
	if err != nil {
		c.destroy()
		return nil, err
	}
	c.maxInline = c.qp.MaxInline()
	c.sqFree = sqDepth
	if err = c.charge(c.recvs * o.BufferSize); err != nil {
		c.destroy()
		return nil, err
	}
	if c.recvMR, err = dev.pd.Register(c.recvs * o.BufferSize); err != nil {
		c.destroy()
		return nil, fmt.Errorf("registering %d receive buffers of %d bytes: %w", c.recvs, o.BufferSize, err)
	}
	if err = c.qp.ToInit(port); err != nil {
		c.destroy()
		return nil, err
	}
	wrs := make([]verbs.RecvWR, c.recvs)
	for i := range wrs {
		wrs[i] = c.recvWR(int32(i))
	}
	if err = c.qp.PostRecv(wrs); err != nil {
		c.destroy()
		return nil, err
	}
	c.recvOutstanding.Add(int32(len(wrs)))
	t.counters.recvsPosted.Add(uint64(len(wrs)))
	return c, nil
}

// charge takes n bytes of registered memory from the transport's budget,
// before they are registered; freeing the connection's memory gives back
// all it took.
func (c *conn) charge(n int) error {
	if err := c.t.budget.take(int64(n)); err != nil {
		return err
	}
	c.charged += int64(n)
	return nil
}

// uncharge gives back what charge took.
func (c *conn) uncharge() {
	c.t.budget.give(c.charged)
	c.charged = 0
}

// recvTag marks the ids of receive work requests; sends use sequence
// numbers below it. A failed completion's opcode is undefined, its id is not.
const recvTag = 1 << 63

func isRecv(wc *verbs.WorkCompletion) bool { return wc.ID&recvTag != 0 }

func (c *conn) recvWR(i int32) verbs.RecvWR {
	return verbs.RecvWR{ID: recvTag | uint64(i), MR: c.recvMR, Offset: uint32(int(i) * c.o.BufferSize), Length: uint32(c.o.BufferSize)}
}

// connect sets up the send side for the peer and moves the QP to RTS.
func (c *conn) connect(peer hello, local hello, rtr verbs.RTRAttr) error {
	c.peer = peer
	if err := c.charge(c.o.SendSlots * int(peer.bufSize)); err != nil {
		return err
	}
	var err error
	if c.sendMR, err = c.dev.pd.Register(c.o.SendSlots * int(peer.bufSize)); err != nil {
		return fmt.Errorf("registering %d send slots of %d bytes: %w", c.o.SendSlots, peer.bufSize, err)
	}
	c.free = make([]int32, c.o.SendSlots)
	for i := range c.free {
		c.free[i] = int32(c.o.SendSlots - 1 - i)
	}
	c.win = credit.NewWindow(int(peer.recvs))
	if err = c.qp.ToRTR(rtr); err != nil {
		return err
	}
	return c.qp.ToRTS(verbs.RTSAttr{SQPSN: local.psn, Timeout: c.o.AckTimeout, RetryCount: c.o.RetryCount})
}

// start runs the poller and the watcher.
func (c *conn) start() {
	c.t.counters.connsOpened.Add(1)
	go c.poll()
	go c.watch()
}

// destroy frees whatever newConn created, when the connection never started.
func (c *conn) destroy() {
	c.torndown.Store(true)
	var closers []interface{ Close() error }
	if c.qp != nil {
		closers = append(closers, c.qp)
	}
	if c.cq != nil {
		closers = append(closers, c.cq)
	}
	if c.ch != nil {
		closers = append(closers, c.ch)
	}
	if c.recvMR != nil {
		closers = append(closers, c.recvMR)
	}
	if c.sendMR != nil {
		closers = append(closers, c.sendMR)
	}
	for _, cl := range closers { // in dependency order: QP, CQ, channel, memory
		if err := cl.Close(); err != nil {
			c.log.Error("freeing verbs resources", zap.Error(err))
		}
	}
	c.uncharge()
}

// ---- sending ----

// checkSend refuses a send that cannot go: too large, or with a context
// already done (nothing is posted for it).
func (c *conn) checkSend(ctx context.Context, n int) error {
	if n > int(c.peer.maxMessage) {
		return fmt.Errorf("%w: %d bytes, the peer accepts at most %d", transport.ErrMessageTooLarge, n, c.peer.maxMessage)
	}
	return ctx.Err()
}

func (c *conn) Send(ctx context.Context, msg []byte) error {
	if err := c.checkSend(ctx, len(msg)); err != nil {
		return err
	}
	if err := c.takeTurn(ctx); err != nil {
		return err
	}
	defer c.giveTurn()
	return c.sendMessage(ctx, msg)
}

// takeTurn waits for the right to send a message.
func (c *conn) takeTurn(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case c.turn <- struct{}{}:
	default:
		c.turnWaiters.Add(1)
		defer c.turnWaiters.Add(-1)
		select {
		case c.turn <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return c.closeErr()
		}
	}
	if c.ctx.Err() != nil {
		<-c.turn
		return c.closeErr()
	}
	if c.abortOwed {
		// The last message was abandoned after some of its fragments
		// left: tell the peer to drop them before anything else.
		if _, err := c.reserve(ctx, false); err != nil {
			<-c.turn
			return err
		}
		if err := c.post(-1, kindAbort, 0, false); err != nil {
			<-c.turn
			return err
		}
		c.abortOwed = false
	}
	return nil
}

func (c *conn) giveTurn() { <-c.turn }

// sendMessage sends msg, fragmented when larger than one peer buffer. When
// ctx ends between fragments the message is abandoned: the next message
// starts with an abort, and the peer drops what it received of this one.
func (c *conn) sendMessage(ctx context.Context, msg []byte) error {
	b := int(c.peer.bufSize)
	n := fragments(len(msg), b)
	for i := range n {
		var k kind
		var head int // bytes of header in this fragment
		var part []byte
		switch {
		case n == 1:
			k, part = kindMessage, msg
		case i == 0:
			k, head, part = kindFirst, firstHeaderLen, msg[:b-firstHeaderLen]
		default:
			off := b - firstHeaderLen + (i-1)*b
			part = msg[off:min(off+b, len(msg))]
			k = kindMiddle
			if i == n-1 {
				k = kindLast
			}
		}
		slot, err := c.reserve(ctx, true)
		if err != nil {
			if i > 0 && c.ctx.Err() == nil {
				c.abortOwed = true
			}
			return err
		}
		mem := c.slotBytes(slot)
		if head > 0 {
			binary.BigEndian.PutUint32(mem, uint32(len(msg)))
		}
		copy(mem[head:], part)
		if err := c.post(slot, k, head+len(part), i == n-1); err != nil {
			return err
		}
	}
	c.noteSent(n > 1)
	if n > 1 {
		c.t.counters.fragmentsSent.Add(uint64(n))
	}
	c.t.counters.messagesSent.Add(1)
	return nil
}

func (c *conn) slotBytes(slot int32) []byte {
	b := int(c.peer.bufSize)
	return c.sendMR.Bytes()[int(slot)*b : int(slot+1)*b]
}

// reserve waits for a credit, a send-queue entry and (with needSlot) a
// send slot, and takes them; it returns the slot, or -1.
func (c *conn) reserve(ctx context.Context, needSlot bool) (int32, error) {
	waited := false
	for {
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		c.mu.Lock()
		if c.ctx.Err() != nil {
			c.mu.Unlock()
			return -1, c.closeErr()
		}
		credit := c.win.Avail() > 0
		slot := !needSlot || len(c.free) > 0
		if credit && slot && c.sqFree > ctlHeadroom {
			c.win.Take()
			c.sqFree--
			s := int32(-1)
			if needSlot {
				s = c.free[len(c.free)-1]
				c.free = c.free[:len(c.free)-1]
			}
			c.mu.Unlock()
			return s, nil
		}
		if !waited {
			waited = true
			if !credit {
				c.t.counters.creditWaits.Add(1)
			} else {
				c.t.counters.slotWaits.Add(1)
			}
		}
		w := c.wake.wait()
		c.mu.Unlock()
		if err := c.await(ctx, w, c.ctx.Done(), false); err != nil {
			return -1, err
		}
	}
}

// post sends a reserved data message of n bytes from slot, with the credits
// owed piggybacked.
func (c *conn) post(slot int32, k kind, n int, last bool) error {
	c.mu.Lock()
	c.rmu.Lock()
	grant := c.led.Piggyback()
	c.rmu.Unlock()
	// Ask for a completion often enough that slots and send-queue entries
	// come back: every SignalEvery sends, whenever they run short, and at
	// the end of a message nobody else waits to follow (so an idle
	// connection has nothing unreaped and Close knows when all is sent).
	c.unsignaled++
	signaled := c.unsignaled >= c.o.SignalEvery || len(c.free) == 0 || c.sqFree <= ctlHeadroom+1 ||
		(last && c.turnWaiters.Load() == 0)
	wr := verbs.SendWR{ID: c.seq, Signaled: signaled, Imm: encodeImm(k, grant), HasImm: true}
	if slot >= 0 {
		wr.MR, wr.Offset, wr.Length = c.sendMR, uint32(int(slot)*int(c.peer.bufSize)), uint32(n)
		wr.Inline = n <= c.maxInline
	}
	c.enqueueLocked(wr, slot)
	c.mu.Unlock()
	return c.flush()
}

// enqueueLocked queues one send for posting and records it in the ring, in
// the order it will be posted. Called with mu held.
func (c *conn) enqueueLocked(wr verbs.SendWR, slot int32) {
	if wr.Signaled {
		c.unsignaled = 0
	}
	c.outbox = append(c.outbox, wr)
	c.ring = append(c.ring, posted{seq: wr.ID, slot: slot, signaled: wr.Signaled})
	c.seq++
}

// flush posts the queued sends. Senders queue and flush; when a flush is
// already posting, it takes theirs too, so concurrent senders share one
// post (one doorbell, one cgo call) instead of taking turns.
func (c *conn) flush() error {
	c.mu.Lock()
	if c.posting {
		c.mu.Unlock()
		return nil
	}
	c.posting = true
	var err error
	for len(c.outbox) > 0 && err == nil {
		batch := c.outbox
		c.outbox = c.spareOutbox[:0]
		c.mu.Unlock()
		err = c.qp.PostSend(batch)
		c.t.counters.sendsPosted.Add(uint64(len(batch)))
		c.mu.Lock()
		c.spareOutbox = batch[:0]
	}
	c.posting = false
	c.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("posting sends: %w", err)
		c.fail(err)
		return fmt.Errorf("%w: %w", transport.ErrClosed, err)
	}
	return nil
}

// sendCreditOnly returns owed credits in a credit-only message when enough
// are owed. It takes no credit and no slot; when the send queue has no room
// (it always should) the poller tries again after the next completion.
func (c *conn) sendCreditOnly() {
	c.mu.Lock()
	if c.ctx.Err() != nil || c.win == nil {
		c.mu.Unlock()
		return
	}
	if c.sqFree == 0 {
		c.ctlWanted = true
		c.mu.Unlock()
		return
	}
	c.rmu.Lock()
	n := c.led.CreditOnly()
	c.rmu.Unlock()
	if n == 0 {
		c.mu.Unlock()
		return
	}
	c.ctlWanted = false
	c.sqFree--
	c.enqueueLocked(verbs.SendWR{ID: c.seq, Signaled: true, Imm: encodeImm(kindCredit, n), HasImm: true}, -1)
	c.mu.Unlock()
	if c.flush() == nil {
		c.t.counters.creditOnlySent.Add(1)
	}
}

func (c *conn) NewSendBuffer(ctx context.Context, n int) (transport.Buffer, error) {
	if err := c.checkSend(ctx, n); err != nil {
		return transport.Buffer{}, err
	}
	if n > int(c.peer.bufSize) {
		// Fragmented anyway: an ordinary buffer, copied into slots.
		return transport.NewBuffer(bufpool.Get(n), heapSend{}, 0), nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return transport.Buffer{}, err
		}
		c.mu.Lock()
		if c.ctx.Err() != nil {
			c.mu.Unlock()
			return transport.Buffer{}, c.closeErr()
		}
		// Lend all slots but one: the message in progress always has a
		// slot to make progress with, whatever buffers are lent.
		if len(c.free) > 0 && c.lent < c.o.SendSlots-1 {
			s := c.free[len(c.free)-1]
			c.free = c.free[:len(c.free)-1]
			c.lent++
			c.mu.Unlock()
			c.lentBufs.Add(1)
			return transport.NewBuffer(c.slotBytes(s)[:n], sendSlot{c}, uint64(s)), nil
		}
		w := c.wake.wait()
		c.mu.Unlock()
		if err := c.await(ctx, w, c.ctx.Done(), false); err != nil {
			return transport.Buffer{}, err
		}
	}
}

func (c *conn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	if b.Owned(heapSend{}) {
		defer b.Release()
		return c.Send(ctx, b.Bytes())
	}
	if !b.Owned(sendSlot{c}) {
		b.Release()
		return errors.New("rdma: SendBuffer takes only buffers from this connection's NewSendBuffer")
	}
	slot, n := int32(b.ID()), b.Len()
	if err := c.takeTurn(ctx); err != nil {
		b.Release()
		return err
	}
	defer c.giveTurn()
	if _, err := c.reserve(ctx, false); err != nil {
		b.Release()
		return err
	}
	// The slot now belongs to the send queue, not to the user.
	c.mu.Lock()
	c.lent--
	c.mu.Unlock()
	c.unlend()
	if err := c.post(slot, kindMessage, n, true); err != nil {
		return err
	}
	c.noteSent(false)
	c.t.counters.messagesSent.Add(1)
	return nil
}

// sendSlot owns send slots lent by NewSendBuffer.
type sendSlot struct{ c *conn }

func (o sendSlot) ReleaseBuffer(id uint64, _ []byte) {
	c := o.c
	c.mu.Lock()
	c.lent--
	c.free = append(c.free, int32(id))
	c.broadcastLocked()
	c.mu.Unlock()
	c.unlend()
}

// heapSend owns buffers too large for a slot.
type heapSend struct{}

func (heapSend) ReleaseBuffer(_ uint64, b []byte) { bufpool.Put(b) }

// broadcastLocked wakes everyone waiting for credits or slots. Called with
// mu held.
func (c *conn) broadcastLocked() { c.wake.broadcast() }

// notifier wakes the goroutines waiting for a condition that a mutex, held
// around both calls, guards. A channel is made only when somebody waits, so
// the data path, where nobody usually does, allocates nothing.
type notifier struct{ ch chan struct{} }

// wait returns a channel closed at the next broadcast.
func (n *notifier) wait() <-chan struct{} {
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// ---- receiving ----

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
		w := c.rwake.wait()
		c.rmu.Unlock()
		if err := c.await(ctx, w, c.local, true); err != nil {
			return transport.Buffer{}, err
		}
	}
}

// deliver queues a received message for Recv. Called with rmu held.
func (c *conn) deliverLocked(b transport.Buffer) {
	c.queue = append(c.queue, b)
	c.rwake.broadcast()
}

// repost posts data receive buffers again and owes the peer their credits.
func (c *conn) repost(bufs []int32) {
	if c.torndown.Load() || len(bufs) == 0 {
		return
	}
	var batch [16]verbs.RecvWR // on the stack: no allocation per message
	for len(bufs) > 0 {
		wrs := batch[:0]
		for len(bufs) > 0 && len(wrs) < len(batch) {
			wrs = append(wrs, c.recvWR(bufs[0]))
			bufs = bufs[1:]
		}
		if err := c.qp.PostRecv(wrs); err != nil {
			if c.ctx.Err() == nil {
				c.fail(fmt.Errorf("re-posting receives: %w", err))
			}
			return
		}
		c.recvOutstanding.Add(int32(len(wrs)))
		c.t.counters.recvsPosted.Add(uint64(len(wrs)))
		c.rmu.Lock()
		for range wrs {
			c.led.Reposted()
		}
		c.rmu.Unlock()
	}
	c.rmu.Lock()
	enough := c.led.Owed() >= credit.Threshold(c.o.RecvBuffers)
	c.rmu.Unlock()
	if enough {
		c.sendCreditOnly()
	}
}

// released takes back a whole message's receive buffer. Buffers are posted
// again in batches of up to releaseBatch (one doorbell, one cgo call for
// several); the poller flushes a smaller batch whenever it runs. A batch is
// at most R/4, so the credits it holds back can never be what the peer
// waits for: with fewer than R/4 buffers unposted, at least ceil(R/2) are
// owed, which sends a credit-only message (see credit.Threshold).
func (c *conn) released(buf int32) {
	c.rmu.Lock()
	c.unposted = append(c.unposted, buf)
	var flush []int32
	if len(c.unposted) >= c.releaseBatch {
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

// ---- completions ----

// spinCheckEvery is how many polls of an empty queue pass between two
// reads of the clock while spinning (a clock read costs microseconds under
// emulation).
const spinCheckEvery = 16

// await waits until w is closed, stop is closed or ctx is done, making sure
// meanwhile that completions get handled: when nobody else holds the
// completion queue, the waiter polls it itself (spinning, with spin, for
// about the round trip when a reply is expected), and returns at once when
// it handled something, for the caller to look again. Otherwise it sleeps;
// the goroutine that holds the queue, or the poller, handles what comes.
func (c *conn) await(ctx context.Context, w, stop <-chan struct{}, spin bool) error {
	if c.drive(spin) {
		return nil
	}
	select {
	case <-w:
	case <-stop:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// drive polls the completion queue if nobody else does and reports whether
// it handled completions.
func (c *conn) drive(spin bool) bool {
	if c.closing.Load() || !c.pmu.TryLock() {
		return false
	}
	if c.pollOnce() > 0 {
		c.letGo()
		return true
	}
	if spin && c.spinWorthIt() {
		budget := c.spinBudget()
		start := time.Now()
		for i := 1; !c.closing.Load(); i++ {
			runtime.Gosched()
			if c.pollOnce() > 0 {
				c.letGo()
				return true
			}
			if i%spinCheckEvery == 0 && time.Since(start) >= budget {
				break
			}
		}
	}
	c.letGo()
	return false
}

// letGo releases the completion queue (pmu), arming it first unless it
// still is, so that the poller wakes for the next completion if nobody
// polls by then.
func (c *conn) letGo() {
	c.flushUnposted()
	c.pl.Lock()
	if !c.armed && !c.closing.Load() {
		c.armed = true
		if err := c.cq.ReqNotify(false); err != nil {
			c.fail(fmt.Errorf("arming the completion queue: %w", err))
		} else {
			// A completion that came before arming raised no event.
			c.pollOnce()
		}
	}
	c.pmu.Unlock()
	c.pl.Unlock()
}

// pollOnce polls the completion queue once and handles what it returns.
// Called with pmu held.
func (c *conn) pollOnce() int {
	n, err := c.cq.Poll(c.wcs)
	if err != nil {
		c.fail(fmt.Errorf("polling completions: %w", err))
		return 0
	}
	if n > 0 {
		c.reposts = c.handle(c.wcs[:n], c.reposts[:0])
		c.flushUnposted()
	}
	return n
}

// spinWorthIt reports whether a reply is expected soon: a message left and
// none came back yet, it was not fragmented (a large transfer takes many
// round trips: spinning through it only takes the processor from the
// peer), and no fragmented message is on its way in. Called with pmu held.
func (c *conn) spinWorthIt() bool {
	return c.o.PollSpin > 0 && c.expect.Load() && !c.bigSend.Load() && c.asm.buf == nil
}

// spinBudget is how long to poll for the reply: twice the observed round
// trip, at most PollSpin.
func (c *conn) spinBudget() time.Duration {
	rtt := time.Duration(c.rtt.Load())
	if rtt <= 0 {
		return c.o.PollSpin
	}
	return min(2*rtt, c.o.PollSpin)
}

// noteSent records that a whole message left (fragmented or not).
func (c *conn) noteSent(fragmented bool) {
	c.sentAt.Store(int64(time.Since(c.epoch)))
	c.bigSend.Store(fragmented)
	c.expect.Store(true)
}

// noteReceived records that a whole message arrived: the first after a
// send closes a round trip, which moves the average (by 1/8).
func (c *conn) noteReceived() {
	if !c.expect.Swap(false) {
		return
	}
	rtt := int64(time.Since(c.epoch)) - c.sentAt.Load()
	if rtt <= 0 {
		return
	}
	avg := c.rtt.Load()
	if avg == 0 {
		avg = rtt
	} else {
		avg += (rtt - avg) / 8
	}
	c.rtt.Store(avg)
}

// poll is the poller goroutine: it sleeps on the completion channel and
// handles what nobody else is polling for; when the connection closes it
// tears it down.
func (c *conn) poll() {
	c.pmu.Lock()
	c.letGo() // arms the queue
	for !c.closing.Load() {
		_, err := c.ch.Wait(context.Background())
		if c.closing.Load() {
			break
		}
		if err != nil && !errors.Is(err, verbs.ErrWoken) {
			c.fail(fmt.Errorf("waiting for completions: %w", err))
			break
		}
		c.pl.Lock()
		c.armed = false // the event is read
		mine := c.pmu.TryLock()
		c.pl.Unlock()
		if !mine {
			continue // its holder re-arms when it lets go
		}
		for c.pollOnce() > 0 {
		}
		c.letGo()
	}
	// Held for good: from now on only the teardown touches the queue.
	c.pmu.Lock()
	c.teardown(c.wcs)
}

// handle processes a batch of completions; data receives that can be
// posted again at once are posted in one batch at the end.
func (c *conn) handle(wcs []verbs.WorkCompletion, reposts []int32) []int32 {
	sendsDone, lastSend := false, uint64(0)
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			c.wcFailed(wc)
			return reposts
		}
		if !isRecv(wc) {
			// Sends complete in order: the last one of the batch frees
			// all, under one lock.
			c.t.counters.sendCompletions.Add(1)
			sendsDone, lastSend = true, wc.ID
			continue
		}
		c.t.counters.recvCompletions.Add(1)
		c.recvOutstanding.Add(-1)
		c.bytesIn.Add(uint64(wc.ByteLen))
		var err error
		if reposts, err = c.received(wc, reposts); err != nil {
			c.t.counters.protocolErrors.Add(1)
			c.log.Warn("closing connection: peer broke the protocol", zap.Error(err))
			c.fail(err)
			return reposts
		}
	}
	if len(reposts) > 0 {
		c.repost(reposts)
	}
	if sendsDone && c.sendCompleted(lastSend) {
		c.sendCreditOnly()
	}
	return reposts
}

// sendCompleted frees the slots and send-queue entries of every send up to
// and including seq (sends complete in order). It reports whether a
// credit-only message waits for send-queue room.
func (c *conn) sendCompleted(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for ; i < len(c.ring) && c.ring[i].seq <= seq; i++ {
		if s := c.ring[i].slot; s >= 0 {
			c.free = append(c.free, s)
		}
		c.sqFree++
	}
	// Keep the ring's array: slide what is left to the front.
	c.ring = c.ring[:copy(c.ring, c.ring[i:])]
	c.broadcastLocked()
	return c.ctlWanted
}

// received handles one receive completion.
func (c *conn) received(wc *verbs.WorkCompletion, reposts []int32) ([]int32, error) {
	buf := int32(wc.ID &^ recvTag)
	if !wc.HasImm {
		return reposts, protoErr("a message without immediate data")
	}
	k, grant, err := decodeImm(wc.Imm)
	if err != nil {
		return reposts, err
	}
	if k == kindCredit {
		if wc.ByteLen != 0 {
			return reposts, protoErr("credit-only message with %d bytes of payload", wc.ByteLen)
		}
		// Post the control receive again before the grant can let more
		// data go out: the bound on control messages counts on it.
		if err := c.postControl(buf); err != nil {
			return reposts, err
		}
	}
	if k == kindCredit || grant > 0 {
		c.mu.Lock()
		if k == kindCredit {
			err = c.win.GrantControl(grant)
		} else {
			err = c.win.Grant(grant)
		}
		c.broadcastLocked()
		c.mu.Unlock()
		if err != nil {
			return reposts, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
		}
	}
	if k == kindCredit {
		return reposts, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.led.Arrived(); err != nil {
		return reposts, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
	}
	off := int(buf) * c.o.BufferSize
	data := c.recvMR.Bytes()[off : off+int(wc.ByteLen)]
	if k == kindAbort {
		if wc.ByteLen != 0 {
			return reposts, protoErr("abort with %d bytes of payload", wc.ByteLen)
		}
		if err := c.asm.abort(); err != nil {
			return reposts, err
		}
		return append(reposts, buf), nil
	}
	if k == kindMessage {
		if err := c.asm.wholeAllowed(); err != nil {
			return reposts, err
		}
		// Handed up in place: the registered memory stays mapped until
		// the user releases it, even if the connection closes first.
		c.lentBufs.Add(1)
		c.deliverLocked(transport.NewBuffer(data, recvBuffer{c}, uint64(buf)))
		c.noteReceived()
		return reposts, nil
	}
	msg, err := c.asm.fragment(k, data)
	if err != nil {
		return reposts, err
	}
	if msg != nil {
		c.queued += len(msg)
		c.deliverLocked(transport.NewBuffer(msg, heapRecv{}, 0))
		c.noteReceived()
	}
	// The fragment is copied out: its buffer can go back, unless too much
	// reassembled data waits for Recv.
	if c.queued >= c.o.RecvQueueBytes {
		c.deferred = append(c.deferred, buf)
		return reposts, nil
	}
	return append(reposts, buf), nil
}

// postControl posts a control receive again at once (it takes no part in
// the credit accounting).
func (c *conn) postControl(buf int32) error {
	if err := c.qp.PostRecv([]verbs.RecvWR{c.recvWR(buf)}); err != nil {
		return fmt.Errorf("re-posting a control receive: %w", err)
	}
	c.recvOutstanding.Add(1)
	c.t.counters.recvsPosted.Add(1)
	return nil
}

// wcFailed handles a failed completion: flushes are expected while closing;
// anything else breaks the connection.
func (c *conn) wcFailed(wc *verbs.WorkCompletion) {
	if isRecv(wc) {
		c.recvOutstanding.Add(-1)
	}
	if wc.Status == verbs.WCWRFlushErr && c.ctx.Err() != nil {
		return
	}
	c.t.counters.wcError(wc.Status)
	err := wc.Err()
	if wc.Status == verbs.WCRNRRetryExcErr {
		// Credits make this impossible: it is a bug, say so loudly.
		c.log.Error("receiver not ready: a send found no posted receive (a credit accounting bug)", zap.Error(err))
	} else {
		c.log.Warn("closing connection: work request failed", zap.Error(err))
	}
	c.fail(fmt.Errorf("work request failed: %w", err))
}

// ---- closing ----

// watch waits for the bootstrap TCP connection to end: the peer closed, or
// died. Nothing is ever sent on it after the handshake.
func (c *conn) watch() {
	defer close(c.watchDone)
	var b [1]byte
	_, err := c.boot.Read(b[:])
	switch {
	case c.ctx.Err() != nil:
	case err == nil:
		c.fail(protoErr("unexpected data on the bootstrap connection"))
	case errors.Is(err, io.EOF):
		c.fail(errors.New("rdma: connection closed by peer"))
	default:
		c.fail(fmt.Errorf("rdma: bootstrap connection lost: %w", err))
	}
}

// fail starts closing the connection because of err.
func (c *conn) fail(err error) {
	c.closeOnce.Do(func() {
		c.errMu.Lock()
		c.err = transport.Closed(err)
		c.errMu.Unlock()
		c.closing.Store(true)
		c.cancel()
		c.ch.Wake()
	})
}

func (c *conn) closeErr() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Close closes the connection and waits for its teardown.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.errMu.Lock()
		c.err = fmt.Errorf("%w: closed locally", transport.ErrClosed)
		c.errMu.Unlock()
		close(c.local)
		c.closing.Store(true)
		c.cancel()
		c.ch.Wake()
	})
	<-c.closed
	return nil
}

// teardown runs on the poller once the connection is closing: it lets posted
// sends complete (a local Close delivers what Send accepted), moves the QP to
// ERR, drains what is flushed, ends the bootstrap connection, and frees the
// verbs resources — registered memory only once users gave back every
// buffer lent to them.
func (c *conn) teardown(wcs []verbs.WorkCompletion) {
	defer close(c.closed)
	deadline := time.Now().Add(c.o.CloseGrace)
	local := false
	select {
	case <-c.local:
		local = true
	default:
	}
	// Sends already posted: wait for their completions while the peer
	// lives (a local close; a peer that closed takes nothing more).
	for local && c.pendingSends() && time.Now().Before(deadline) {
		c.drainOnce(wcs, deadline)
	}
	// Receives that completed before the close are still delivered.
	for {
		n, err := c.cq.Poll(wcs)
		if err != nil || n == 0 {
			break
		}
		c.handleClosing(wcs[:n])
	}
	if err := c.qp.ToError(); err != nil {
		c.log.Debug("moving the queue pair to ERR", zap.Error(err))
	}
	c.boot.Close()
	c.rmu.Lock()
	c.rdone = true
	c.asm.reset()
	c.rwake.broadcast()
	if local {
		// Nobody will Recv these: forget them (a receive buffer is not
		// posted again now, its memory just stops being lent).
		for i := range c.queue {
			if c.queue[i].Owned(recvBuffer{c}) {
				c.lentBufs.Add(-1)
			} else {
				c.queue[i].Release()
			}
		}
		c.queue = nil
	}
	c.rmu.Unlock()
	// Every work request still posted completes, flushed; wait for them
	// (within the grace period) so none is left when the QP goes.
	for (c.recvOutstanding.Load() > 0 || c.pendingSends()) && time.Now().Before(deadline) {
		if c.drainOnce(wcs, deadline) == 0 {
			break
		}
	}
	c.torndown.Store(true)
	c.mu.Lock()
	c.broadcastLocked()
	c.mu.Unlock()
	<-c.watchDone
	for _, cl := range []interface{ Close() error }{c.qp, c.cq, c.ch} {
		if err := cl.Close(); err != nil {
			c.log.Error("freeing verbs resources", zap.Error(err))
		}
	}
	if c.lentBufs.Load() == 0 {
		c.freeMemory()
	}
	c.t.counters.connsClosed.Add(1)
}

// freeMemory deregisters the receive and send memory, once.
func (c *conn) freeMemory() {
	c.freeOnce.Do(func() {
		for _, mr := range []*verbs.MR{c.recvMR, c.sendMR} {
			if mr != nil {
				if err := mr.Close(); err != nil {
					c.log.Error("deregistering memory", zap.Error(err))
				}
			}
		}
		c.uncharge()
		c.t.release(c.dev)
	})
}

// pendingSends reports whether a posted send will still complete: one that
// asked for a completion is in the ring (unsignaled ones report nothing).
func (c *conn) pendingSends() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.ring {
		if p.signaled {
			return true
		}
	}
	return false
}

// drainOnce waits (until deadline) for completions and handles them; it
// returns how many it handled.
func (c *conn) drainOnce(wcs []verbs.WorkCompletion, deadline time.Time) int {
	n, err := c.cq.Poll(wcs)
	if err != nil {
		return 0
	}
	if n == 0 {
		if c.cq.ReqNotify(false) != nil {
			return 0
		}
		if n, _ = c.cq.Poll(wcs); n == 0 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_, err := c.ch.Wait(ctx)
			if errors.Is(err, verbs.ErrWoken) { // the wake that ended poll
				_, err = c.ch.Wait(ctx)
			}
			cancel()
			if err != nil {
				return 0
			}
			if n, _ = c.cq.Poll(wcs); n == 0 {
				return 0
			}
		}
	}
	c.handleClosing(wcs[:n])
	return n
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
			} else {
				c.sendCompleted(wc.ID)
			}
		case !isRecv(wc):
			c.sendCompleted(wc.ID)
		default:
			c.recvOutstanding.Add(-1)
			if _, err := c.received(wc, nil); err != nil {
				c.log.Debug("dropping a message received while closing", zap.Error(err))
			}
		}
	}
}

func (c *conn) Done() <-chan struct{} { return c.ctx.Done() }

// BytesReceived counts fragments as they complete, so a large message on
// its way is a sign of life before it is whole (transport.Activity).
func (c *conn) BytesReceived() uint64 { return c.bytesIn.Load() }
func (c *conn) MaxMessageSize() int   { return int(c.peer.maxMessage) }
func (c *conn) LocalAddr() net.Addr   { return c.boot.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr  { return c.boot.RemoteAddr() }
