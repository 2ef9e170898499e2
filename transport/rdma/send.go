package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// sender is the send side of a connection: credits, send slots and the
// send queue, guarded by mu. The slots' memory comes from an arena
// (arena.go), shared by the device's connections or the connection's own;
// avail counts how many more this connection may hold.
type sender struct {
	mu          sync.Mutex
	win         *credit.Window
	mem         *arena
	avail       int            // slots this connection may still take, of SendSlots
	lastSlot    bool           // the slot just reserved was the arena's last free one
	lent        int            // slots lent by NewSendBuffer
	ring        []posted       // queued and posted sends, in order, until completed
	outbox      []verbs.SendWR // queued, not yet posted
	spareOutbox []verbs.SendWR
	inlined     []int32 // slots of inline sends in outbox: free once posted
	spareInline []int32
	memFreed    bool // freeSendMemory ran
	// fill is held shared while a sender copies into a slot it reserved,
	// and whole by freeSendMemory before the memory goes: a Send that
	// reserved a slot just before the connection closed must not copy
	// into memory the teardown freed (a SIGSEGV in the guest's conformance
	// suite, CloseUnblocksSend/peer). fillGone is set under it.
	fill     sync.RWMutex
	fillGone atomic.Bool
	// beforeFill, set only by tests, runs between a fragment's reserve and
	// the copy into its slot: the window a close falls in.
	beforeFill  atomic.Pointer[func()]
	posting     bool   // a flush is posting the outbox
	seq         uint64 // id of the next send
	sqFree      int
	unsignaled  int
	ctlWanted   bool          // a credit-only message waits for send-queue room
	wake        notifier      // credits, slots or send-queue entries freed (the turn's holder waits)
	lendWake    notifier      // a slot may be lent (NewSendBuffer waits), woken one at a time
	turn        chan struct{} // one message at a time: fragments stay contiguous
	turnWaiters atomic.Int32
	abortOwed   bool // a message was abandoned mid-way; its turn holder sends the abort
}

// checkSend refuses a send that cannot go: too large, or with a context
// already done (nothing is posted for it).
func (c *conn) checkSend(ctx context.Context, n int) error {
	if n > int(c.peer.maxMessage) {
		return fmt.Errorf("%w: %d bytes, the peer accepts at most %d", transport.ErrMessageTooLarge, n, c.peer.maxMessage)
	}
	return ctx.Err()
}

func (c *conn) Send(ctx context.Context, msg []byte) error { return c.send(ctx, msg, true) }

// SendBackground is Send for a message no reply is awaited to soon, which
// Close may drop (transport.BackgroundSender): the receiver is not roused to
// spin for one, the round trip is not timed, and a message sent inline
// after sends that all asked for a completion asks for none (see post). An
// idle connection's keepalive round then costs no send completion, and its
// event, at either end.
func (c *conn) SendBackground(ctx context.Context, msg []byte) error {
	return c.send(ctx, msg, false)
}

// send checks msg, takes the turn and sends it; awaited as sendMessage's.
func (c *conn) send(ctx context.Context, msg []byte, awaited bool) error {
	if err := c.checkSend(ctx, len(msg)); err != nil {
		return err
	}
	if err := c.takeTurn(ctx); err != nil {
		return err
	}
	defer c.giveTurn()
	return c.sendMessage(ctx, msg, awaited)
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
		case <-c.sig.Done():
			return c.closeErr()
		}
	}
	if c.sig.IsSet() {
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
		if err := c.post(-1, kindAbort, 0, false, false); err != nil {
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
// With awaited, a reply is expected: the receiver is roused to poll for it.
func (c *conn) sendMessage(ctx context.Context, msg []byte, awaited bool) error {
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
			if i > 0 && !c.sig.IsSet() {
				c.abortOwed = true
			}
			return err
		}
		if h := c.beforeFill.Load(); h != nil {
			(*h)()
		}
		c.fill.RLock()
		if c.fillGone.Load() {
			c.fill.RUnlock()
			c.mem.give(slot) // a shared arena outlives this connection
			return c.closeErr()
		}
		mem := c.slotBytes(slot)
		if head > 0 {
			binary.BigEndian.PutUint32(mem, uint32(len(msg)))
		}
		copy(mem[head:], part)
		c.fill.RUnlock()
		if err := c.post(slot, k, head+len(part), i == n-1, !awaited); err != nil {
			return err
		}
	}
	if awaited {
		c.noteSent(n > 1)
		c.rouseReceiver(n > 1)
	}
	if n > 1 {
		c.t.counters.fragmentsSent.Add(uint64(n))
	}
	c.t.counters.messagesSent.Add(1)
	return nil
}

func (c *conn) slotBytes(slot int32) []byte {
	_, _, b := c.mem.locate(slot)
	return b
}

// reserve waits for a credit, a send-queue entry and (with needSlot) a
// send slot, and takes them; it returns the slot, or -1. A slot is one of
// the connection's SendSlots and memory from the arena; when the arena has
// none free it waits on the arena, the rest being there.
func (c *conn) reserve(ctx context.Context, needSlot bool) (int32, error) {
	waited := false
	for {
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		c.mu.Lock()
		if c.sig.IsSet() {
			c.mu.Unlock()
			return -1, c.closeErr()
		}
		credit := c.win.Avail() > 0
		slot := !needSlot || c.avail > 0
		if credit && slot && c.sqFree > ctlHeadroom {
			s := int32(-1)
			if needSlot {
				id, last, w := c.mem.take()
				if w != nil {
					if !waited {
						waited = true
						c.t.counters.slotWaits.Add(1)
					}
					c.mu.Unlock()
					err := c.await(ctx, w, c.sig.Done(), false)
					c.mem.forget(w, err != nil)
					if err != nil {
						return -1, err
					}
					continue
				}
				s, c.lastSlot = id, last
				c.avail--
			}
			c.win.Take()
			c.sqFree--
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
		err := c.await(ctx, w, c.sig.Done(), false)
		c.forgetWake(w)
		if err != nil {
			return -1, err
		}
	}
}

// post sends a reserved data message of n bytes from slot, with the credits
// owed piggybacked. quiet is a background send (SendBackground).
func (c *conn) post(slot int32, k kind, n int, last, quiet bool) error {
	c.mu.Lock()
	c.rmu.Lock()
	imm := c.outImmLocked(k) // the credits owed, and lent (lend.go)
	c.rmu.Unlock()
	// Ask for a completion often enough that slots and send-queue entries
	// come back (signalLocked); at the end of a message nobody else waits
	// to follow, so an idle connection has nothing unreaped and Close
	// knows when all is sent.
	//
	// A background send may end its message without one when it goes
	// inline (it holds no slot) and every send before it asked for one
	// (no slot waits on a completion it would have to bring): it keeps a
	// send-queue entry until a later send's completion, and the rules of
	// signalLocked still bound those.
	quiet = quiet && n <= c.maxInline && c.unsignaled == 0
	wr := verbs.SendWR{ID: c.seq, Signaled: c.signalLocked(c.o.SignalEvery, last && !quiet), Imm: imm, HasImm: true}
	ringSlot := slot
	if slot >= 0 {
		wr.MR, wr.Offset, _ = c.mem.locate(slot)
		wr.Length = uint32(n)
		if wr.Inline = n <= c.maxInline; wr.Inline {
			// The device copies it when it is posted: the slot goes
			// back then (flush), not with the completion.
			c.inlined = append(c.inlined, slot)
			ringSlot = -1
		}
	}
	c.enqueueLocked(wr, ringSlot)
	c.handOffLendLocked(c.o.SendSlots)
	c.mu.Unlock()
	return c.flush()
}

// signalLocked counts one more data send and reports whether it must ask
// for a completion. Called with mu held.
//
// An unsignaled send's slot and send-queue entry come back only with the
// completion of a later signaled one (sends complete in order), so a send
// goes unsignaled only when a later send is sure to come before anybody
// can need what it holds: it is not the last of a message, or others wait
// for their turn; and it leaves a free slot (kept free by mayLendLocked),
// room in the send queue, and fewer than every unsignaled in a row. And
// the arena's memory: a send whose slot was the arena's last free one asks
// for a completion, so whoever waits for arena memory, on any connection,
// has a completion on its way that brings some back (docs/rdma.md).
func (s *sender) signalLocked(every int, last bool) bool {
	s.unsignaled++
	arenaEmpty := s.lastSlot
	s.lastSlot = false
	return s.unsignaled >= every || s.avail == 0 || arenaEmpty || s.sqFree <= ctlHeadroom+1 ||
		(last && s.turnWaiters.Load() == 0)
}

// mayLendLocked reports whether NewSendBuffer may lend a free slot now.
// It keeps one slot unlent, so the message in progress always has one to
// make progress with. And it never takes the last free slot while the
// newest send is unsignaled: the turn's holder, needing a slot, would find
// none free and no completion coming to free one, while the holders of
// the lent slots wait for its turn to send them (how 1000 concurrent
// streams stalled). The sender that posts next takes that slot and,
// finding no other free, asks for the completion that brings the rest
// back. Called with mu held.
//
// The arena has a rule of its own (arena.lend): a lend never takes its
// last free slot.
func (s *sender) mayLendLocked(slots int) bool {
	return s.avail > 0 && s.lent < slots-1 && (s.avail > 1 || s.unsignaled == 0)
}

// enqueueLocked queues one send for posting and records it in the ring, in
// the order it will be posted. Called with mu held.
func (s *sender) enqueueLocked(wr verbs.SendWR, slot int32) {
	if wr.Signaled {
		s.unsignaled = 0
	}
	s.outbox = append(s.outbox, wr)
	s.ring = append(s.ring, posted{seq: wr.ID, slot: slot, signaled: wr.Signaled})
	s.seq++
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
		batch, inlined := c.outbox, c.inlined
		c.outbox, c.inlined = c.spareOutbox[:0], c.spareInline[:0]
		c.mu.Unlock()
		err = c.qp.PostSend(batch)
		c.t.counters.sendsPosted.Add(uint64(len(batch)))
		c.mu.Lock()
		c.spareOutbox = batch[:0]
		if len(inlined) > 0 {
			// Posted (or failed): the device holds no reference to
			// inline sends' memory.
			c.avail += len(inlined)
			c.mem.give(inlined...)
			c.broadcastLocked()
			c.handOffLendLocked(c.o.SendSlots)
		}
		c.spareInline = inlined[:0]
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
	if c.sig.IsSet() || c.win == nil {
		c.mu.Unlock()
		return
	}
	if c.sqFree == 0 {
		c.ctlWanted = true
		c.mu.Unlock()
		return
	}
	c.rmu.Lock()
	n, lend := c.led.CreditOnly(), 0
	if n > 0 {
		lend = c.led.TakeLend()
	}
	c.rmu.Unlock()
	if n == 0 {
		c.mu.Unlock()
		return
	}
	c.ctlWanted = false
	c.sqFree--
	c.enqueueLocked(verbs.SendWR{ID: c.seq, Signaled: true, Imm: encodeImmLend(kindCredit, n, lend), HasImm: true}, -1)
	c.handOffLendLocked(c.o.SendSlots)
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
		return transport.NewBuffer(bufpool.Get(n)[:n], heapSend{}, 0), nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return transport.Buffer{}, err
		}
		c.mu.Lock()
		if c.sig.IsSet() {
			c.mu.Unlock()
			return transport.Buffer{}, c.closeErr()
		}
		if c.mayLendLocked(c.o.SendSlots) {
			s, ok := c.mem.lend()
			if !ok {
				// The arena is (nearly) empty and may not grow: heap
				// memory, copied into a slot when sent.
				c.mu.Unlock()
				return transport.NewBuffer(bufpool.Get(n)[:n], heapSend{}, 0), nil
			}
			c.avail--
			c.lent++
			c.handOffLendLocked(c.o.SendSlots)
			c.mu.Unlock()
			c.lentBufs.Add(1)
			return transport.NewBuffer(c.slotBytes(s)[:n], sendSlot{c}, uint64(s)), nil
		}
		w := c.lendWake.wait()
		c.mu.Unlock()
		err := c.await(ctx, w, c.sig.Done(), false)
		c.mu.Lock()
		c.lendWake.forget(w)
		if err != nil {
			// It may have been woken for a slot it will not take.
			c.handOffLendLocked(c.o.SendSlots)
		}
		c.mu.Unlock()
		if err != nil {
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
	c.handOffLendLocked(c.o.SendSlots)
	c.mu.Unlock()
	c.unlend()
	if err := c.post(slot, kindMessage, n, true, false); err != nil {
		return err
	}
	c.noteSent(false)
	c.rouseReceiver(false)
	c.t.counters.messagesSent.Add(1)
	return nil
}

// rouseReceiver wakes a Recv that sleeps while nobody polls the completion
// queue, now that a message left and its reply is expected: woken, it
// polls for the reply itself (spinning for about the round trip, see
// await), instead of the reply costing a completion event, the poller's
// wake-up and the poller's hand-off to it. An RPC reader enters Recv
// before the caller sends, when no reply is expected yet, so without this
// it always sleeps. The wake-up happens while the message travels, off
// the reply's path. Not for fragmented messages: nobody spins through
// those.
func (c *conn) rouseReceiver(fragmented bool) {
	if fragmented || c.o.PollSpin <= 0 || c.closing.Load() {
		return
	}
	if !c.pmu.TryLock() {
		return // somebody polls: it delivers the reply
	}
	// Only looked: the queue stays as armed as it was.
	c.pmu.Unlock()
	c.rmu.Lock()
	if len(c.queue) == 0 {
		c.rwake.signal()
	}
	c.rmu.Unlock()
}

// sendSlot owns send slots lent by NewSendBuffer.
type sendSlot struct{ c *conn }

func (o sendSlot) ReleaseBuffer(id uint64, _ []byte) {
	c := o.c
	c.mu.Lock()
	c.lent--
	c.avail++
	c.mem.give(int32(id))
	c.broadcastLocked()
	c.handOffLendLocked(c.o.SendSlots)
	c.mu.Unlock()
	c.unlend()
}

// heapSend owns buffers too large for a slot.
type heapSend struct{}

func (heapSend) ReleaseBuffer(_ uint64, b []byte) { bufpool.Put(b) }

// forgetWake ends a wait on the send side's notifier.
func (c *conn) forgetWake(w chan struct{}) {
	c.mu.Lock()
	c.wake.forget(w)
	c.mu.Unlock()
}

// broadcastLocked wakes the turn's holder waiting for credits, slots or
// send-queue room. Called with mu held.
func (c *conn) broadcastLocked() { c.wake.broadcast() }

// handOffLendLocked wakes one NewSendBuffer waiter when a slot can be lent
// now. Called with mu held wherever what mayLendLocked looks at changes in
// its favour; a waiter that takes a slot calls it again for the next one,
// and one that gives up after being woken passes its wake on. One waiter
// at a time, not all: with a thousand streams waiting for a slot, waking
// every one on each completion and grant made them take turns at the lock
// for nothing (ManyStreams took a minute over rdma://).
func (s *sender) handOffLendLocked(slots int) {
	if s.mayLendLocked(slots) {
		s.lendWake.signal()
	}
}

// sendCompleted frees the slots and send-queue entries of every send up to
// and including seq (sends complete in order). It reports whether a
// credit-only message waits for send-queue room.
func (c *conn) sendCompleted(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.completedLocked(seq)
	c.broadcastLocked()
	c.handOffLendLocked(c.o.SendSlots)
	return c.ctlWanted
}

// completedLocked takes back the slots and send-queue entries of the sends
// up to and including seq. Called with mu held.
func (s *sender) completedLocked(seq uint64) {
	var back [32]int32
	ids := back[:0]
	i := 0
	for ; i < len(s.ring) && s.ring[i].seq <= seq; i++ {
		if slot := s.ring[i].slot; slot >= 0 {
			ids = append(ids, slot)
			s.avail++
		}
		s.sqFree++
	}
	s.mem.give(ids...)
	// Keep the ring's array: slide what is left to the front.
	s.ring = s.ring[:copy(s.ring, s.ring[i:])]
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

// posted is one send on the send queue, in posting order.
type posted struct {
	seq      uint64
	slot     int32 // -1: no slot (credit-only), or none left to free (inline)
	signaled bool
}

// freeSendMemory gives the arena the slots of sends that never completed
// (the close grace ran out), or were never posted (posting failed), once
// the queue pair is gone and the device no longer reads them, and leaves a
// shared arena, which goes with its last connection. Called once, by
// freeMemory or destroy, when nothing is lent any more.
func (c *conn) freeSendMemory() {
	c.fill.Lock() // waits for a sender copying into a slot
	c.fillGone.Store(true)
	c.fill.Unlock()
	c.mu.Lock()
	if c.mem == nil || c.memFreed {
		c.mu.Unlock()
		return
	}
	c.memFreed = true
	var ids []int32
	for _, p := range c.ring {
		if p.slot >= 0 {
			ids = append(ids, p.slot)
			c.avail++
		}
	}
	c.ring = c.ring[:0]
	c.avail += len(c.inlined)
	ids = append(ids, c.inlined...)
	c.inlined = c.inlined[:0]
	c.mem.give(ids...)
	c.mu.Unlock()
	if !c.o.PrivateSendSlots {
		c.t.leaveArena(c.dev, c.mem)
	}
}
