package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// sender is the send side of a connection: credits, send slots and the
// send queue, guarded by mu. The slots' memory comes from an arena
// (arena.go), shared by the device's connections or the connection's own;
// avail counts how many more this connection may hold. Its methods take
// mu; of the connection's locks they take only rmu besides, through the
// receiver's methods (the credits owed ride on every send).
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
	abortOwed   bool        // a message was abandoned mid-way; its turn holder sends the abort
	flushOwed   bool        // the turn's holder queued its message's last send: flush once the turn is given back
	swept       atomic.Bool // holds lent credits: in the transport's give-back sweep
	answerFree  atomic.Bool // the peer asked: the next message TrySend takes goes as its answer, with no credit (answer.go)

	// Set when the connection is made.
	slots       int // Options.SendSlots
	signalEvery int // Options.SignalEvery
	maxInline   int
	ctr         *counters
	closeSig    *signal.Signal // the connection's: no send once it is set
	joinSweep   func()         // puts the connection in the give-back sweep (swept just set)

	rndv     rndvSend // rendezvous.go
	rndvHook rndvTestHook
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
	return c.giveTurnAndFlush(c.sendMessage(ctx, msg, awaited))
}

// giveTurnAndFlush gives the turn back, then rings the doorbell for the
// message's last send, which the turn's holder queued without posting
// (flushOwed), and returns err, or the post's error. The turn goes first so
// that the next sender queues its message while this one's post is in the
// device (on Soft-RoCE a post is a system call that does the send's work):
// its flush then finds this one posting and leaves it to this one's loop,
// which takes whatever was queued meanwhile in one post (postQueued). The
// order is the turn's: sends are queued in turn order and posted in queue
// order.
func (c *conn) giveTurnAndFlush(err error) error {
	owed := c.flushOwed
	c.flushOwed = false
	c.giveTurn()
	if owed {
		if ferr := c.flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// TrySend is Send when msg can go now (transport.TrySender): the turn is
// free, and a credit, a send slot and a send-queue entry are all there.
// Else it reports false, having sent and taken nothing; it never waits. It
// never overtakes: it takes the turn as Send does, so it follows every
// message whose send took the turn first, and it declines whenever the
// turn's holder would first have to settle something (an abort owed, a
// rendezvous not yet answered). A message larger than one of the peer's
// buffers (fragments, or a rendezvous) is declined: those are Send's. The
// RPC layer sends a stream's WINDOW_UPDATE with it from the goroutine that
// read the message; no reply is awaited, so the receiver is not roused to
// poll for one.
func (c *conn) TrySend(msg []byte) (bool, error) {
	if took, err := c.tryTurn(msg); !took {
		return false, err
	}
	defer c.giveTurn()
	return c.trySendTurn(msg, false)
}

// tryTurn takes the turn for msg when msg may go by TrySend (it passes
// checkSend and fits one of the peer's buffers) and the turn is free now,
// and reports whether it did; err is checkSend's.
func (c *conn) tryTurn(msg []byte) (bool, error) {
	if err := c.checkSend(context.Background(), len(msg)); err != nil || len(msg) > int(c.peer.bufSize) {
		return false, err
	}
	select {
	case c.turn <- struct{}{}:
		return true, nil
	default:
		return false, nil
	}
}

// trySendTurn is TrySend's send for the turn's holder (TrySend, TryReply,
// TryAsk), msg checked by checkSend and no larger than one of the peer's
// buffers. It goes as the answer the peer asked for, if it did; else as an
// ask when ask is set and a buffer can be set aside for the answer.
func (c *conn) trySendTurn(msg []byte, ask bool) (bool, error) {
	if c.sig.IsSet() {
		return false, c.closeErr()
	}
	if c.abortOwed {
		return false, nil
	}
	slot, free, ok, err := c.tryTake()
	if !ok {
		return false, err
	}
	k := kindMessage
	if free {
		k = kindAnswer
	} else if ask && c.setAside() {
		k = kindAsk
	}
	if !c.startFill(slot) {
		// Closing: a buffer set aside goes back with the teardown (detach).
		return false, c.closeErr()
	}
	copy(c.slotBytes(slot), msg)
	c.endFill()
	if err := c.post(slot, k, len(msg), true, false); err != nil {
		return false, err
	}
	c.t.counters.messagesSent.Add(1)
	return true, nil
}

// tryTake takes a credit, a send-queue entry and a send slot when all are
// there now, as take does, and reports whether it did; it never waits and
// counts no wait. When the peer asked (answerFree) the message is the
// answer: free, it takes no credit. It takes nothing while a rendezvous
// is in progress or its reply is not yet taken: the turn's holder settles
// that first (takeTurn), and TrySend does not wait for it. Called with the
// turn held.
func (s *sender) tryTake() (slot int32, free, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() {
		return -1, false, false, s.closeSig.Err()
	}
	free = s.answerFree.Load()
	if s.rndv.state != rndvNone || !free && s.win.Avail() <= 0 || s.avail <= 0 || s.sqFree <= ctlHeadroom {
		return -1, false, false, nil
	}
	id, last, ok := s.mem.tryTake()
	if !ok {
		return -1, false, false, nil
	}
	slot, s.lastSlot = id, last
	s.avail--
	if free {
		s.answerFree.Store(false)
	} else {
		s.win.Take()
	}
	s.sqFree--
	return slot, free, true, nil
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
	if _, mr, err := c.awaitReply(ctx); err != nil {
		// The last message's rendezvous is still being read: nothing
		// may overtake it.
		<-c.turn
		return err
	} else if mr != nil {
		// Its sender gave up before the reply: done or refused, the
		// message is over and its region goes.
		c.freeRegion(mr)
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
	if c.rendezvous(len(msg)) {
		if sent, err := c.sendRendezvous(ctx, msg, awaited); sent || err != nil {
			return err
		}
		// No memory for it at one end: in fragments.
	}
	return c.queueFragments(ctx, msg, awaited, true)
}

// sendFragments sends msg whole or in fragments (see sendMessage), every
// fragment posted before it returns.
func (c *conn) sendFragments(ctx context.Context, msg []byte, awaited bool) error {
	return c.queueFragments(ctx, msg, awaited, false)
}

// queueFragments is sendFragments; with deferLast, the last fragment is
// queued but not posted: the caller flushes it once it gave the turn back
// (flushOwed, giveTurnAndFlush).
func (c *conn) queueFragments(ctx context.Context, msg []byte, awaited, deferLast bool) error {
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
		if !c.startFill(slot) {
			return c.closeErr()
		}
		mem := c.slotBytes(slot)
		if head > 0 {
			binary.BigEndian.PutUint32(mem, uint32(len(msg)))
		}
		copy(mem[head:], part)
		c.endFill()
		if i == n-1 && deferLast {
			// The doorbell rings once the turn is given back
			// (giveTurnAndFlush).
			c.queueData(&c.receiver, slot, k, head+len(part), true, !awaited)
			c.flushOwed = true
		} else if err := c.post(slot, k, head+len(part), i == n-1, !awaited); err != nil {
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
		slot, w, arena, err := c.take(needSlot, &waited)
		if err != nil {
			return -1, err
		}
		if w == nil {
			return slot, nil
		}
		err = c.await(ctx, w, c.sig.Done(), false)
		if arena {
			c.mem.forget(w, err != nil)
		} else {
			c.forgetWake(w)
		}
		if err != nil {
			return -1, err
		}
	}
}

// take takes a credit, a send-queue entry and (with needSlot) a send slot
// when all are there; else it returns w to wait on: the arena's notifier
// (arena) when only the arena's memory is missing, else the sender's.
// waited: a wait was counted already.
func (s *sender) take(needSlot bool, waited *bool) (slot int32, w chan struct{}, arena bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() {
		return -1, nil, false, s.closeSig.Err()
	}
	credit := s.win.Avail() > 0
	hasSlot := !needSlot || s.avail > 0
	if credit && hasSlot && s.sqFree > ctlHeadroom {
		slot = -1
		if needSlot {
			id, last, w := s.mem.take()
			if w != nil {
				if !*waited {
					*waited = true
					s.ctr.slotWaits.Add(1)
				}
				return -1, w, true, nil
			}
			slot, s.lastSlot = id, last
			s.avail--
		}
		s.win.Take()
		s.sqFree--
		return slot, nil, false, nil
	}
	if !*waited {
		*waited = true
		if !credit {
			s.ctr.creditWaits.Add(1)
		} else {
			s.ctr.slotWaits.Add(1)
		}
	}
	return -1, s.wake.wait(), false, nil
}

// post sends a reserved data message of n bytes from slot, with the credits
// owed piggybacked. quiet is a background send (SendBackground).
func (c *conn) post(slot int32, k kind, n int, last, quiet bool) error {
	c.queueData(&c.receiver, slot, k, n, last, quiet)
	return c.flush()
}

// queueData queues a data message of n bytes from slot (see post), with
// the credits r owes.
func (s *sender) queueData(r *receiver, slot int32, k kind, n int, last, quiet bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	imm := r.outImm(k) // the credits owed, and lent (lend.go)
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
	quiet = quiet && n <= s.maxInline && s.unsignaled == 0
	wr := verbs.SendWR{ID: s.seq, Signaled: s.signalLocked(last && !quiet), Imm: imm, HasImm: true}
	ringSlot := slot
	if slot >= 0 {
		wr.MR, wr.Offset, _ = s.mem.locate(slot)
		wr.Length = uint32(n)
		if wr.Inline = n <= s.maxInline; wr.Inline {
			// The device copies it when it is posted: the slot goes
			// back then (flush), not with the completion.
			s.inlined = append(s.inlined, slot)
			ringSlot = -1
		}
	}
	s.enqueueLocked(wr, ringSlot)
	s.handOffLendLocked()
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
func (s *sender) signalLocked(last bool) bool {
	s.unsignaled++
	arenaEmpty := s.lastSlot
	s.lastSlot = false
	return s.unsignaled >= s.signalEvery || s.avail == 0 || arenaEmpty || s.sqFree <= ctlHeadroom+1 ||
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
func (s *sender) mayLendLocked() bool {
	return s.avail > 0 && s.lent < s.slots-1 && (s.avail > 1 || s.unsignaled == 0)
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
	if err := c.postQueued(c.qp.PostSend); err != nil {
		err = fmt.Errorf("posting sends: %w", err)
		c.fail(err)
		return fmt.Errorf("%w: %w", transport.ErrClosed, err)
	}
	return nil
}

// postQueued posts the queued sends with post (the QP's PostSend), unless
// a flush is posting them already: that one's loop takes them; mu is not
// held while it posts.
func (s *sender) postQueued(post func([]verbs.SendWR) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.posting {
		return nil
	}
	s.posting = true
	var err error
	for len(s.outbox) > 0 && err == nil {
		batch, inlined := s.outbox, s.inlined
		s.outbox, s.inlined = s.spareOutbox[:0], s.spareInline[:0]
		s.mu.Unlock()
		err = post(batch)
		s.ctr.sendsPosted.Add(uint64(len(batch)))
		s.ctr.sendPosts.Add(1)
		s.mu.Lock()
		s.spareOutbox = batch[:0]
		if len(inlined) > 0 {
			// Posted (or failed): the device holds no reference to
			// inline sends' memory.
			s.avail += len(inlined)
			s.mem.give(inlined...)
			s.broadcastLocked()
			s.handOffLendLocked()
		}
		s.spareInline = inlined[:0]
	}
	s.posting = false
	return err
}

// sendCreditOnly returns owed credits in a credit-only message when enough
// are owed. It takes no credit and no slot; when the send queue has no room
// (it always should) the poller tries again after the next completion.
func (c *conn) sendCreditOnly() {
	if c.queueCreditOnly(&c.receiver) && c.flush() == nil {
		c.t.counters.creditOnlySent.Add(1)
	}
}

// queueCreditOnly queues a credit-only message with the credits r owes,
// when enough are owed and the send queue has room (else it marks one
// wanted); it reports whether it queued one.
func (s *sender) queueCreditOnly(r *receiver) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() || s.win == nil {
		return false
	}
	if s.sqFree == 0 {
		s.ctlWanted = true
		return false
	}
	n, lend := r.creditOnly()
	if n == 0 {
		return false
	}
	s.ctlWanted = false
	s.sqFree--
	s.enqueueLocked(verbs.SendWR{ID: s.seq, Signaled: true, Imm: encodeImmLend(kindCredit, n, lend), HasImm: true}, -1)
	s.handOffLendLocked()
	return true
}

func (c *conn) NewSendBuffer(ctx context.Context, n int) (transport.Buffer, error) {
	if err := c.checkSend(ctx, n); err != nil {
		return transport.Buffer{}, err
	}
	if c.rendezvous(n) {
		// Marshaled straight into a region the peer will read.
		if b, ok := c.lendRegion(n); ok {
			return b, nil
		}
	}
	if n > int(c.peer.bufSize) {
		// Fragmented anyway: an ordinary buffer, copied into slots.
		return transport.NewBuffer(bufpool.Get(n)[:n], heapSend{}, 0), nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return transport.Buffer{}, err
		}
		slot, heap, w, err := c.lendSlot()
		switch {
		case err != nil:
			return transport.Buffer{}, err
		case heap:
			// The arena is (nearly) empty and may not grow: heap
			// memory, copied into a slot when sent.
			return transport.NewBuffer(bufpool.Get(n)[:n], heapSend{}, 0), nil
		case w == nil:
			c.lentBufs.Add(1)
			return transport.NewBuffer(c.slotBytes(slot)[:n], sendSlot{c}, uint64(slot)), nil
		}
		err = c.await(ctx, w, c.sig.Done(), false)
		c.forgetLend(w, err != nil)
		if err != nil {
			return transport.Buffer{}, err
		}
	}
}

// lendSlot lends a free slot for NewSendBuffer; heap: the arena may not
// lend one (use heap memory); else w to wait on.
func (s *sender) lendSlot() (slot int32, heap bool, w chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() {
		return -1, false, nil, s.closeSig.Err()
	}
	if !s.mayLendLocked() {
		return -1, false, s.lendWake.wait(), nil
	}
	slot, ok := s.mem.lend()
	if !ok {
		return -1, true, nil, nil
	}
	s.avail--
	s.lent++
	s.handOffLendLocked()
	return slot, false, nil, nil
}

// forgetLend ends a wait that lendSlot began; a waiter that gave up may
// have been woken for a slot it will not take: it passes the wake on.
func (s *sender) forgetLend(w chan struct{}, gaveUp bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lendWake.forget(w)
	if gaveUp {
		s.handOffLendLocked()
	}
}

func (c *conn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	if b.Owned(heapSend{}) {
		defer b.Release()
		return c.Send(ctx, b.Bytes())
	}
	if b.Owned(lentRegion{c}) {
		return c.sendLentRegion(ctx, b)
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
	if _, err := c.reserve(ctx, false); err != nil {
		c.giveTurn()
		b.Release()
		return err
	}
	// The slot now belongs to the send queue, not to the user.
	c.slotTaken()
	c.unlend()
	c.queueData(&c.receiver, slot, kindMessage, n, true, false)
	c.flushOwed = true
	c.noteSent(false)
	c.rouseReceiver(false)
	c.t.counters.messagesSent.Add(1)
	return c.giveTurnAndFlush(nil)
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
	if fragmented || c.o.PollSpin <= 0 || c.closing.Load() || !c.cqs.rousable() {
		return
	}
	c.rouse()
}

// sendSlot owns send slots lent by NewSendBuffer.
type sendSlot struct{ c *conn }

func (o sendSlot) ReleaseBuffer(id uint64, _ []byte) {
	o.c.slotReleased(int32(id))
	o.c.unlend()
}

// slotTaken: a lent slot was given to SendBuffer.
func (s *sender) slotTaken() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lent--
	s.handOffLendLocked()
}

// slotReleased: a lent slot came back unsent.
func (s *sender) slotReleased(slot int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lent--
	s.avail++
	s.mem.give(slot)
	s.broadcastLocked()
	s.handOffLendLocked()
}

// heapSend owns buffers too large for a slot.
type heapSend struct{}

func (heapSend) ReleaseBuffer(_ uint64, b []byte) { bufpool.Put(b) }

// forgetWake ends a wait on the send side's notifier.
func (s *sender) forgetWake(w chan struct{}) {
	s.mu.Lock()
	s.wake.forget(w)
	s.mu.Unlock()
}

// broadcastLocked wakes the turn's holder waiting for credits, slots or
// send-queue room. Called with mu held.
func (s *sender) broadcastLocked() { s.wake.broadcast() }

// wakeAll wakes every waiter of the send side: the connection is torn down.
func (s *sender) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake.broadcast()
	s.lendWake.broadcast()
}

// granted takes the credits a message granted, and lent (a credit-only
// message's as control: docs/rdma.md), and wakes the senders waiting. It
// reports whether a rendezvous reply is owed: the credit may be what it
// waited for.
func (s *sender) granted(control bool, grant, lend int) (replyOwed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lend > 0 {
		// Before the grant: a credit-only message's threshold is the
		// window's with the lend (docs/rdma.md).
		err = s.lentLocked(lend)
	}
	if err == nil && control {
		err = s.win.GrantControl(grant)
	} else if err == nil {
		err = s.win.Grant(grant)
	}
	s.broadcastLocked()
	return s.rndv.replyOwed != 0, err
}

// handOffLendLocked wakes one NewSendBuffer waiter when a slot can be lent
// now. Called with mu held wherever what mayLendLocked looks at changes in
// its favour; a waiter that takes a slot calls it again for the next one,
// and one that gives up after being woken passes its wake on. One waiter
// at a time, not all: with a thousand streams waiting for a slot, waking
// every one on each completion and grant made them take turns at the lock
// for nothing (ManyStreams took a minute over rdma://).
func (s *sender) handOffLendLocked() {
	if s.mayLendLocked() {
		s.lendWake.signal()
	}
}

// sendCompleted frees the slots and send-queue entries of every send up to
// and including seq (sends complete in order). It reports whether a
// credit-only message waits for send-queue room, and whether a rendezvous
// reply is owed (the entries freed may be what it waited for), and whether
// invalidated windowed regions wait for putInvalidated.
func (s *sender) sendCompleted(seq uint64) (ctlWanted, replyOwed, toPut, readPosted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.completedLocked(seq)
	s.broadcastLocked()
	s.handOffLendLocked()
	// The entries just freed may be what the read's next chunk waits for
	// (readCompleted), the one it just completed among them.
	readPosted = s.rndv.nextChunk && !s.closeSig.IsSet() && s.postChunkLocked()
	return s.ctlWanted, s.rndv.replyOwed != 0, len(s.rndv.toPut) > 0, readPosted
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
		if s.ring[i].reserved {
			s.rndv.rsvFree++
			if s.ring[i].inval {
				s.invalidatedLocked(s.ring[i].seq)
			}
		} else {
			s.sqFree++
		}
	}
	s.mem.give(ids...)
	// Keep the ring's array: slide what is left to the front.
	s.ring = s.ring[:copy(s.ring, s.ring[i:])]
}

// pendingSends reports whether a posted send will still complete: one that
// asked for a completion is in the ring (unsignaled ones report nothing).
func (s *sender) pendingSends() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.ring {
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
	reserved bool // a rendezvous read, reply, window bind or invalidation: its entry is one of rndvReserve
	inval    bool // a window invalidation (rendezvous_window.go)
}

// freeSendMemory gives the arena the slots of sends that never completed
// (the close grace ran out), or were never posted (posting failed), once
// the queue pair is gone and the device no longer reads them, and leaves a
// shared arena, which goes with its last connection. Called once, by
// freeMemory or destroy, when nothing is lent any more.
func (c *conn) freeSendMemory() {
	c.stopFills()
	if c.freeSlots() && !c.o.PrivateSendSlots {
		c.t.leaveArena(c.dev, c.mem)
	}
}

// startFill takes the right to copy into slot, which the caller reserved;
// false once the send memory is gone (stopFills): the slot is given back.
func (s *sender) startFill(slot int32) bool {
	s.fill.RLock()
	if s.fillGone.Load() {
		s.fill.RUnlock()
		s.mem.give(slot) // a shared arena outlives this connection
		return false
	}
	return true
}

// endFill: the copy into the slot is done.
func (s *sender) endFill() { s.fill.RUnlock() }

// stopFills waits for a sender copying into a slot, and stops any from
// starting: the send memory is about to go.
func (s *sender) stopFills() {
	s.fill.Lock()
	s.fillGone.Store(true)
	s.fill.Unlock()
}

// freeSlots gives the arena every slot the send side still holds, once;
// it reports whether it did (this call was the one).
func (s *sender) freeSlots() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil || s.memFreed {
		return false
	}
	s.memFreed = true
	var ids []int32
	for _, p := range s.ring {
		if p.slot >= 0 {
			ids = append(ids, p.slot)
			s.avail++
		}
	}
	s.ring = s.ring[:0]
	s.avail += len(s.inlined)
	ids = append(ids, s.inlined...)
	s.inlined = s.inlined[:0]
	s.mem.give(ids...)
	return true
}
