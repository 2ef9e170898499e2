package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// The rendezvous (docs/rdma.md, "Rendezvous"): a message above
// Options.RendezvousThreshold, between two sides that both set featRndv,
// is not fragmented. The sender takes a region for it readable by the peer
// through one key — a pooled region with the connection's memory window
// bound to the message (rendezvous_window.go), or, on a device without
// windows, a region registered for it (verbs.RegisterRemoteRead) —
// copies the message in (unless it was marshaled there), and sends a
// descriptor (kindRndv: id, address, rkey, length) in an ordinary Send;
// it keeps the turn, so nothing else it sends can overtake the message.
// The receiver checks the descriptor against its limits before it takes
// anything, registers a buffer of its own within the memory budget, and
// pulls the message with one RDMA Read. When the read completes the buffer
// is delivered, lent until the reader releases it, and the receiver
// replies kindRndvDone; the sender then invalidates the window's key (or
// deregisters the region: its key dies with it) and gives up the turn. A receiver that cannot take the
// message now (its budget) replies kindRndvRefused and the sender sends
// it in fragments instead. Replies carry no payload and take a credit;
// they go without the turn (a side may wait for its own rendezvous while
// it must reply to the peer's), as soon as a credit is there.
const (
	kindRndv        kind = 7 // a rendezvous descriptor (rndvDescLen bytes)
	kindRndvDone    kind = 8 // the rendezvous in progress was read; no payload
	kindRndvRefused kind = 9 // the rendezvous in progress is refused: send it in fragments; no payload

	// featRndv: this side takes part in rendezvous (its QPs allow RDMA
	// Read of the regions it registers for them).
	featRndv = 1 << 2
)

// DefaultRendezvousThreshold is Options.RendezvousThreshold's default: in
// the test bed's guest (docs/rdma.md, "Rendezvous: the table") the
// rendezvous beat fragments at 1 and 16 MiB (faster, and 1.3-8x less CPU
// per byte at both ends) and gained nothing at 64 KiB.
const DefaultRendezvousThreshold = 1 << 20

// rndvReserve is how many send-queue entries are kept for the reads and
// replies of rendezvous, beyond the data sends' (see queueRead).
const rndvReserve = 8

// rndvDesc describes a rendezvous region: rkey names it at the peer, addr
// is its first byte, n its length; id counts the connection's rendezvous
// (one at a time, each one more than the last).
type rndvDesc struct {
	id   uint32
	rkey uint32
	addr uint64
	n    uint32
}

const rndvDescLen = 20

func (d rndvDesc) encode(b []byte) {
	binary.BigEndian.PutUint32(b[0:], d.id)
	binary.BigEndian.PutUint32(b[4:], d.rkey)
	binary.BigEndian.PutUint64(b[8:], d.addr)
	binary.BigEndian.PutUint32(b[16:], d.n)
}

// decodeRndv decodes a descriptor and checks it against what this side
// accepts: max, the largest message, and want, the id it expects. Nothing
// is allocated for it before it passed.
func decodeRndv(b []byte, want uint32, max int) (rndvDesc, error) {
	if len(b) != rndvDescLen {
		return rndvDesc{}, protoErr("rendezvous descriptor of %d bytes, want %d", len(b), rndvDescLen)
	}
	d := rndvDesc{
		id:   binary.BigEndian.Uint32(b[0:]),
		rkey: binary.BigEndian.Uint32(b[4:]),
		addr: binary.BigEndian.Uint64(b[8:]),
		n:    binary.BigEndian.Uint32(b[16:]),
	}
	switch {
	case d.id != want:
		return rndvDesc{}, protoErr("rendezvous %d, want %d", d.id, want)
	case d.n == 0:
		return rndvDesc{}, protoErr("rendezvous of an empty message")
	case int64(d.n) > int64(max):
		return rndvDesc{}, protoErr("rendezvous of %d bytes, over the %d-byte limit", d.n, max)
	case d.addr+uint64(d.n) < d.addr:
		return rndvDesc{}, protoErr("rendezvous region at %#x of %d bytes wraps around", d.addr, d.n)
	}
	return d, nil
}

// rndvState is where the sender's rendezvous in progress is.
type rndvState uint8

const (
	rndvNone    rndvState = iota
	rndvPending           // the descriptor left; no reply yet
	rndvDone
	rndvRefused
)

// rndvSend is the sender's side of the rendezvous, guarded by its mu.
type rndvSend struct {
	region *verbs.MR // the region the peer may read, until its reply or the connection's end
	state  rndvState
	wake   notifier // the reply came, or the connection ended
	// abandoned: the sender stopped waiting (its ctx ended); the reply,
	// when it comes, frees the region.
	abandoned bool
	id        uint32 // the next descriptor's id

	// The replies and reads this side posts for the peer's rendezvous.
	replyOwed kind // a reply waiting for a credit, or 0
	rsvFree   int  // of rndvReserve send-queue entries
	readSeq   uint64
	reading   bool // a read is in progress: a chunk posted, or the next one due
	// The read in progress, in chunks of rndvReadChunk (queueRead):
	// readMR is read into, readDesc read from; readOff bytes are in
	// (the chunk outstanding starts there); nextChunk: the next one
	// waits for a reserved send-queue entry.
	readMR    *verbs.MR
	readDesc  rndvDesc
	readOff   uint32
	nextChunk bool

	lent     map[uint64]*verbs.MR // regions NewSendBuffer lent, by id
	nextLent uint64

	// The connection's memory window and its windowed regions
	// (rendezvous_window.go): key is the window's last bound key.
	mw    *verbs.MW
	key   uint32
	wins  []winRegion
	toPut []*verbs.MR // invalidated and released: for the pool
}

// rndvTestHook, set only by tests, may change a descriptor before it
// leaves (a forged key).
type rndvTestHook = atomic.Pointer[func(*rndvDesc)]

// rndvRecv is the receiver's side of the rendezvous, guarded by rmu.
type rndvRecv struct {
	next uint32 // the id the next descriptor must have
	// target is the buffer being read into, until the read completes:
	// set and taken under rmu, taken by freeRndv without it (it may run
	// from a release under rmu).
	target   atomic.Pointer[verbs.MR]
	n        int
	doneOwed bool // the reply waits for Recv to take queued messages (RecvQueueBytes)
	// busy: a descriptor was accepted and its message is not delivered
	// (nor refused) yet; the buffer may still be being registered.
	busy bool
}

// rndvEvent is a rendezvous message accept took: k, and with read the
// peer's descriptor to read.
type rndvEvent struct {
	k    kind
	desc rndvDesc
	read bool
}

// rndvBuf owns a message delivered in the buffer it was read into.
type rndvBuf struct {
	c  *conn
	mr *verbs.MR
}

func (o *rndvBuf) ReleaseBuffer(uint64, []byte) {
	o.c.dev.reads.put(o.mr)
	o.c.unlend()
}

// freeRegion deregisters a sender's rendezvous region and gives its
// memory back to the budget; a windowed one goes back to its pool once its
// key is invalidated (rendezvous_window.go).
func (c *conn) freeRegion(mr *verbs.MR) {
	if mr == nil {
		return // taken by the teardown (freeRndv)
	}
	if mr.Windowed() {
		if c.releaseWindowed(mr) {
			c.dev.wins.put(mr)
		}
		return
	}
	n := mr.Len()
	if err := mr.Close(); err != nil {
		c.log.Error("deregistering a rendezvous region", zap.Error(err))
	}
	c.t.budget.give(int64(n))
}

// rendezvous reports whether msg goes by rendezvous.
func (c *conn) rendezvous(n int) bool {
	return c.rndvOn && n > c.o.RendezvousThreshold && n > int(c.peer.bufSize)
}

// sendRendezvous sends msg by rendezvous, holding the turn: it copies msg
// into a region registered for it (sendRegion). sent is false (and err
// nil) when the message must go in fragments instead: no memory here for
// the region, or the peer refused it.
func (c *conn) sendRendezvous(ctx context.Context, msg []byte, awaited bool) (sent bool, err error) {
	mr := c.newRegion(len(msg))
	if mr == nil {
		return false, nil
	}
	copy(mr.Bytes(), msg)
	refused, err := c.sendRegion(ctx, mr, len(msg), awaited)
	if refused != nil {
		c.freeRegion(refused)
		return false, nil
	}
	return err == nil, err
}

// newRegion takes a region the peer may read, of at least n bytes, within
// the memory budget: a windowed one from the device's pool, or, without
// memory windows, one registered for this transfer; nil when there is no
// memory for it (the message goes in fragments).
func (c *conn) newRegion(n int) *verbs.MR {
	mr, fallback := c.windowedRegion(n)
	if mr != nil {
		return mr
	}
	if fallback || c.t.budget.take(int64(n)) != nil {
		c.t.counters.rndvFallbacks.Add(1)
		return nil
	}
	mr, err := c.dev.pd.RegisterRemoteRead(n)
	if err != nil {
		c.t.budget.give(int64(n))
		c.t.counters.rndvFallbacks.Add(1)
		c.log.Debug("registering a rendezvous region: sending in fragments", zap.Int("bytes", n), zap.Error(err))
		return nil
	}
	return mr
}

// sendRegion sends the message in mr (its first n bytes) by rendezvous,
// holding the turn, and frees mr once the peer read it, or with the
// connection. When the peer refuses, mr is returned (refused) for the
// caller to send in fragments and free.
func (c *conn) sendRegion(ctx context.Context, mr *verbs.MR, n int, awaited bool) (refused *verbs.MR, err error) {
	slot, err := c.reserve(ctx, true)
	if err != nil {
		c.freeRegion(mr)
		return nil, err
	}
	if !c.startFill(slot) {
		c.freeRegion(mr)
		return nil, c.closeErr()
	}
	d := rndvDesc{addr: mr.Addr(), rkey: mr.RKey(), n: uint32(n)}
	if !c.publishRegion(mr, &d) {
		c.endFill()
		c.freeRegion(mr)
		return nil, c.closeErr()
	}
	if mr.Windowed() {
		c.dev.wins.scrub(mr, n)
		// Queued before the descriptor, executed before it is sent.
		if d.rkey, err = c.queueBind(mr, n); err != nil {
			c.endFill()
			return nil, err // the region goes with the connection (freeRndv)
		}
		c.t.counters.rndvWindowed.Add(1)
	}
	if h := c.rndvHook.Load(); h != nil {
		(*h)(&d)
	}
	d.encode(c.slotBytes(slot))
	c.endFill()
	if err := c.post(slot, kindRndv, rndvDescLen, true, !awaited); err != nil {
		return nil, err // the region goes with the connection (freeRndv)
	}
	c.t.counters.rndvSent.Add(1)
	if awaited {
		c.noteSent(true)
	}
	st, mr, err := c.awaitReply(ctx)
	if err != nil {
		return nil, err
	}
	if st == rndvRefused {
		c.t.counters.rndvRefused.Add(1)
		return mr, nil
	}
	c.freeRegion(mr)
	c.t.counters.messagesSent.Add(1)
	return nil, nil
}

// lentRegion owns the regions NewSendBuffer lends for messages that will
// go by rendezvous (the message is marshaled straight into registered
// memory: no copy on this side); id is the region's in lentRegions.
type lentRegion struct{ c *conn }

func (o lentRegion) ReleaseBuffer(id uint64, _ []byte) {
	// A region SendBuffer took is the rendezvous' (and was unlent then).
	if mr := o.c.takeLentRegion(id); mr != nil {
		o.c.freeRegion(mr)
		o.c.unlend()
	}
}

// lendRegion registers a region for NewSendBuffer; ok false: no memory for
// it (an ordinary buffer then).
func (c *conn) lendRegion(n int) (transport.Buffer, bool) {
	mr := c.newRegion(n)
	if mr == nil {
		return transport.Buffer{}, false
	}
	c.mu.Lock()
	r := &c.sender.rndv
	if r.lent == nil {
		r.lent = make(map[uint64]*verbs.MR)
	}
	id := r.nextLent
	r.nextLent++
	r.lent[id] = mr
	c.mu.Unlock()
	c.lentBufs.Add(1)
	// [:n:n]: a pooled region still holds an earlier message past n.
	return transport.NewBuffer(mr.Bytes()[:n:n], lentRegion{c}, id), true
}

// takeLentRegion takes back a region NewSendBuffer lent.
func (s *sender) takeLentRegion(id uint64) *verbs.MR {
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := s.rndv.lent[id]
	delete(s.rndv.lent, id)
	return mr
}

// sendLentRegion is SendBuffer for a region NewSendBuffer lent: sent by
// rendezvous without a copy, or in fragments from the region when the
// peer refuses it.
func (c *conn) sendLentRegion(ctx context.Context, b transport.Buffer) error {
	mr := c.takeLentRegion(b.ID())
	if mr == nil {
		return errors.New("rdma: SendBuffer of a region already sent or released")
	}
	// The region is the rendezvous' now (sendRegion frees it), not the
	// user's: it no longer keeps the connection's memory.
	defer c.unlend()
	if err := c.takeTurn(ctx); err != nil {
		c.freeRegion(mr)
		return err
	}
	defer c.giveTurn()
	refused, err := c.sendRegion(ctx, mr, b.Len(), true)
	if refused == nil {
		return err
	}
	defer c.freeRegion(refused)
	return c.sendFragments(ctx, refused.Bytes()[:b.Len()], true)
}

// publishRegion makes mr the region in progress and gives d its id; false
// once the connection is closed (mr is the caller's to free).
func (s *sender) publishRegion(mr *verbs.MR, d *rndvDesc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() || s.memFreed {
		return false
	}
	s.rndv.region, s.rndv.state, s.rndv.abandoned = mr, rndvPending, false
	d.id = s.rndv.id
	s.rndv.id++
	return true
}

// awaitReply waits for the peer's reply to the rendezvous in progress and
// returns it with the region, the caller's to free. When ctx ends first
// the rendezvous stays in progress (the next turn's holder waits for it,
// takeTurn; the reply frees the region); when the connection ends, the
// region goes with it (freeRndv).
func (c *conn) awaitReply(ctx context.Context) (rndvState, *verbs.MR, error) {
	for {
		st, mr, w, err := c.takeReply()
		if err != nil {
			return st, nil, err
		}
		if w == nil {
			return st, mr, nil
		}
		err = c.await(ctx, w, c.sig.Done(), false)
		if mr := c.forgetReply(w, err != nil); mr != nil {
			c.freeRegion(mr)
		}
		if err != nil {
			return rndvPending, nil, err
		}
	}
}

// takeReply takes the reply to the rendezvous in progress, with the region
// to free, or returns w to wait on. With none in progress it returns
// rndvNone.
func (s *sender) takeReply() (st rndvState, mr *verbs.MR, w chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.rndv.state {
	case rndvNone:
		return rndvNone, nil, nil, nil
	case rndvPending:
		if s.closeSig.IsSet() {
			return rndvPending, nil, nil, s.closeSig.Err()
		}
		return rndvPending, nil, s.rndv.wake.wait(), nil
	}
	st, mr = s.rndv.state, s.rndv.region
	s.rndv.state, s.rndv.region = rndvNone, nil
	return st, mr, nil, nil
}

// forgetReply ends a wait takeReply began; gaveUp: the waiter's ctx
// ended, the reply (if not already here: then it returns the region to
// free) frees the region when it comes.
func (s *sender) forgetReply(w chan struct{}, gaveUp bool) *verbs.MR {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rndv.wake.forget(w)
	if !gaveUp || s.rndv.state == rndvNone {
		return nil
	}
	if s.rndv.state == rndvPending {
		s.rndv.abandoned = true
		return nil
	}
	mr := s.rndv.region
	s.rndv.state, s.rndv.region = rndvNone, nil
	return mr
}

// replied takes the peer's reply (kindRndvDone or kindRndvRefused) to the
// rendezvous in progress; it returns the region to free when its sender
// stopped waiting.
func (s *sender) replied(k kind) (*verbs.MR, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rndv.state != rndvPending {
		return nil, protoErr("a %v with no rendezvous in progress", k)
	}
	if s.rndv.region != nil && s.rndv.region.Windowed() {
		// The key dies now: the peer read the region, or will not.
		if err := s.queueInvalidateLocked(s.rndv.region); err != nil {
			return nil, err
		}
	}
	s.rndv.wake.broadcast()
	if s.rndv.abandoned {
		// Nobody takes the reply: whoever waits for the turn sees none
		// in progress.
		mr := s.rndv.region
		s.rndv.state, s.rndv.region, s.rndv.abandoned = rndvNone, nil, false
		return mr, nil
	}
	s.rndv.state = rndvDone
	if k == kindRndvRefused {
		s.rndv.state = rndvRefused
	}
	return nil, nil
}

// startRead begins the rendezvous d the peer described: an RDMA Read into
// a buffer of this side's own, within the memory budget, or, without the
// memory, a refusal. A buffer the pool has ready is read into at once;
// registering a new one takes up to ~100 ms (16 MiB in the guest), so it
// is done on a goroutine of its own, never on the completion handler (a
// shared completion queue serves other connections too). The goroutine
// holds a lent count: the connection's memory, and its device, stay until
// it returned.
func (c *conn) startRead(d rndvDesc) error {
	if c.closing.Load() {
		return nil // the peer's region goes with its connection
	}
	if mr := c.dev.reads.get(int(d.n)); mr != nil {
		c.t.counters.rndvPooled.Add(1)
		return c.readInto(mr, d)
	}
	c.lentBufs.Add(1)
	go func() {
		defer c.unlend()
		mr, err := c.dev.reads.take(int(d.n))
		if err != nil {
			c.log.Debug("refusing a rendezvous", zap.Int("bytes", int(d.n)), zap.Error(err))
			c.endRead()
			c.reply(kindRndvRefused)
			return
		}
		if err := c.readInto(mr, d); err != nil {
			c.t.counters.protocolErrors.Add(1)
			c.fail(err)
		}
	}()
	return nil
}

// readInto posts the RDMA Read of d into mr (at least d.n bytes).
func (c *conn) readInto(mr *verbs.MR, d rndvDesc) error {
	if !c.setTarget(mr, int(d.n)) {
		c.dev.reads.put(mr)
		return nil // closing
	}
	if err := c.queueRead(mr, d); err != nil {
		return err
	}
	_ = c.flush() // a failure closed the connection (flush)
	return nil
}

// setTarget records the buffer being read into; false once the receive
// side is done (mr is the caller's to free).
func (r *receiver) setTarget(mr *verbs.MR, n int) bool {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.rdone {
		return false
	}
	r.rndv.target.Store(mr)
	r.rndv.n = n
	return true
}

// endRead: the rendezvous in progress ends without a delivery (refused).
func (r *receiver) endRead() {
	r.rmu.Lock()
	r.rndv.busy = false
	r.rmu.Unlock()
}

// rndvReadChunk is the most one RDMA Read work request asks for; a larger
// rendezvous is read in consecutive chunks, one outstanding at a time. On
// Soft-RoCE between two guests a read response lost on the wire costs an
// ack timeout and a resend of what was left of the whole Read: one Read
// of 1 GiB had not completed after 13 minutes; in 1 MiB chunks a loss
// costs at most one chunk, and 1 GiB moved in 97-100 s under -race
// (docs/rdma.md, "Rendezvous: 1 GiB"). A hardware NIC splits a Read into
// MTU-sized responses itself; a 1 MiB chunk costs it one more round trip
// per MiB, a few µs against the ~100 µs a MiB takes at 100 Gb/s.
// A variable for the tests (-rdma.readchunk).
var rndvReadChunk uint32 = 1 << 20

// queueRead queues the RDMA Read of d into mr, its first chunk now. It
// takes one of the rndvReserve send-queue entries kept for reads and
// replies, per chunk: at most one read is in progress (the peer waits for
// the reply to one before it describes the next), one chunk of it
// outstanding, and the reply to a read is posted after its last chunk, so
// the completion of the next read frees the entries of both.
func (s *sender) queueRead(mr *verbs.MR, d rndvDesc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() {
		return nil
	}
	if s.rndv.rsvFree == 0 || s.rndv.reading {
		return protoErr("a rendezvous read with %d reserved send-queue entries free, reading %v", s.rndv.rsvFree, s.rndv.reading)
	}
	s.rndv.reading = true
	s.rndv.readMR, s.rndv.readDesc, s.rndv.readOff = mr, d, 0
	s.postChunkLocked()
	return nil
}

// postChunkLocked posts the next chunk of the read in progress, given a
// reserved send-queue entry; without one it stays due (nextChunk) until a
// send completion frees one (sendCompleted). Called with mu held.
func (s *sender) postChunkLocked() bool {
	if s.rndv.rsvFree == 0 {
		s.rndv.nextChunk = true
		return false
	}
	s.rndv.nextChunk = false
	s.rndv.rsvFree--
	d, off := s.rndv.readDesc, s.rndv.readOff
	s.rndv.readSeq = s.seq
	wr := verbs.SendWR{ID: s.seq, MR: s.rndv.readMR, Offset: off, Length: s.chunkLenLocked(), Read: true,
		RemoteAddr: d.addr + uint64(off), RKey: d.rkey, Signaled: true}
	s.unsignaled = 0
	s.outbox = append(s.outbox, wr)
	s.ring = append(s.ring, posted{seq: wr.ID, slot: -1, signaled: true, reserved: true})
	s.seq++
	return true
}

// chunkLenLocked is the length of the chunk at readOff. Called with mu
// held.
func (s *sender) chunkLenLocked() uint32 {
	return min(s.rndv.readDesc.n-s.rndv.readOff, rndvReadChunk)
}

// readCompleted takes the completion of the send work request seq if it
// is the read's chunk outstanding: it returns the chunk's length, and
// whether it was the last (the read is done). After any other chunk the
// next is due: sendCompleted posts it once the batch's send completions
// gave their reserved entries back.
func (s *sender) readCompleted(seq uint64) (n uint32, last, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.rndv.reading || s.rndv.nextChunk || s.rndv.readSeq != seq {
		return 0, false, false
	}
	n = s.chunkLenLocked()
	s.rndv.readOff += n
	if s.rndv.readOff < s.rndv.readDesc.n {
		s.rndv.nextChunk = true
		return n, false, true
	}
	s.rndv.reading = false
	s.rndv.readMR = nil
	return n, true, true
}

// readInFlight reports whether a rendezvous read is in progress.
func (s *sender) readInFlight() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rndv.reading
}

// isReadWR reports whether the send work request seq is the chunk of the
// rendezvous read outstanding (a failed completion's opcode is undefined).
func (s *sender) isReadWR(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rndv.reading && !s.rndv.nextChunk && s.rndv.readSeq == seq
}

// readDone delivers the message the read brought, lent in its buffer, and
// replies to the peer (once Recv took enough queued messages, when
// RecvQueueBytes is exceeded).
func (c *conn) readDone() error {
	due, err := c.deliverRead()
	if err != nil || !due {
		return err
	}
	c.reply(kindRndvDone)
	return nil
}

func (r *receiver) deliverRead() (replyNow bool, err error) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.rdone {
		return false, nil // torn down meanwhile: freeRndv frees the buffer
	}
	mr, n := r.rndv.target.Swap(nil), r.rndv.n
	if mr == nil {
		return false, protoErr("a rendezvous read completed with none in progress")
	}
	r.rndv.busy = false
	r.lentCount.Add(1)
	r.queued += n
	// [:n:n]: a pooled buffer still holds an earlier message past n.
	r.deliverLocked(transport.NewBuffer(mr.Bytes()[:n:n], &rndvBuf{c: r.self, mr: mr}, 0))
	r.onMessage()
	r.ctr.rndvRead.Add(1)
	if r.queued > r.queueBytes+n {
		// Recv is behind by more than this message: the peer's next one
		// waits for it to catch up (next).
		r.rndv.doneOwed = true
		return false, nil
	}
	return true, nil
}

// takeDoneOwed: Recv took a message; the deferred reply is due when the
// queue is back within RecvQueueBytes. Called with rmu held.
func (r *receiver) takeDoneOwedLocked() bool {
	if r.rndv.doneOwed && r.queued <= r.queueBytes {
		r.rndv.doneOwed = false
		return true
	}
	return false
}

// reply sends the reply k to the peer's rendezvous, now or, without a
// credit, as soon as one comes (sendOwedReply, after every grant).
func (c *conn) reply(k kind) {
	if c.queueReply(&c.receiver, k) {
		_ = c.flush()
	}
}

// sendOwedReply sends a reply that waited for a credit.
func (c *conn) sendOwedReply() { c.reply(0) }

// queueReply queues the reply k (0: the one owed, if any) when a credit
// and a reserved send-queue entry are there, else keeps it owed.
func (s *sender) queueReply(r *receiver, k kind) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k != 0 {
		s.rndv.replyOwed = k
	}
	if s.rndv.replyOwed == 0 || s.closeSig.IsSet() || s.win.Avail() == 0 || s.rndv.rsvFree == 0 {
		return false
	}
	s.win.Take()
	s.rndv.rsvFree--
	wr := verbs.SendWR{ID: s.seq, Signaled: true, Imm: r.outImm(s.rndv.replyOwed), HasImm: true}
	s.rndv.replyOwed = 0
	s.unsignaled = 0
	s.outbox = append(s.outbox, wr)
	s.ring = append(s.ring, posted{seq: wr.ID, slot: -1, signaled: true, reserved: true})
	s.seq++
	s.handOffLendLocked()
	return true
}

// acceptRndv takes a rendezvous message k (with its payload data) that
// arrived: a descriptor to read, or a reply to this side's. Called with
// rmu held.
func (r *receiver) acceptRndvLocked(k kind, data []byte) (desc rndvDesc, read bool, err error) {
	switch k {
	case kindRndv:
		if err := r.asm.wholeAllowed(); err != nil {
			return desc, false, err
		}
		if r.rndv.busy {
			return desc, false, protoErr("a rendezvous descriptor while one is being read")
		}
		d, err := decodeRndv(data, r.rndv.next, r.asm.max)
		if err != nil {
			return desc, false, err
		}
		r.rndv.next++
		r.rndv.busy = true
		return d, true, nil
	default:
		if len(data) != 0 {
			return desc, false, protoErr("%v with %d bytes of payload", k, len(data))
		}
		return desc, false, nil
	}
}

// freeRndv frees the rendezvous memory the connection still holds once
// its queue pair is gone: a region the peer was to read (its key dies
// here, with the connection) and a buffer a read was filling.
func (c *conn) freeRndv() {
	c.mu.Lock()
	region := c.sender.rndv.region
	c.sender.rndv.region = nil
	lent := c.sender.rndv.lent
	c.sender.rndv.lent = nil
	c.mu.Unlock()
	// The window first: its key dies with it.
	c.freeWindows(region)
	for _, mr := range lent {
		// Lent and never sent nor released: only reachable when the
		// user dropped the buffer, which the lent count then never let
		// this run. Defensive.
		c.freeRegion(mr)
	}
	if region != nil {
		c.freeRegion(region)
	}
	if target := c.receiver.rndv.target.Swap(nil); target != nil {
		c.dev.reads.put(target)
	}
}

// rndvReadFailed says what a failed rendezvous read means.
func rndvReadFailed(err error) error {
	return fmt.Errorf("rendezvous: RDMA Read of the peer's region failed (the peer's key no longer valid, or the region not as described): %w", err)
}

// rendezvousArrived acts on a rendezvous message accept took: reads what a
// descriptor describes, or takes a reply.
func (c *conn) rendezvousArrived(rv rndvEvent) error {
	if rv.read {
		return c.startRead(rv.desc)
	}
	mr, err := c.replied(rv.k)
	if err == nil {
		_ = c.flush() // the invalidation of a window (a failure closed the connection)
	}
	if mr != nil {
		// Its sender gave up waiting: deregister it (its key dies
		// here), but not on the completion handler.
		c.lentBufs.Add(1)
		go func() {
			defer c.unlend()
			c.freeRegion(mr)
		}()
	}
	return err
}
