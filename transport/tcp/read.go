package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The read role: one goroutine at a time reads the socket and parses
// frames. The frame it was parsing when it stopped stays in c.rs for the
// next holder, so a read interrupted half-way loses and splits nothing.
//
// A Recv takes the role when it is free, or from the reader goroutine while
// that waits for the first byte of a frame (a read deadline in the past
// interrupts its read() at once), and reads the socket itself: the message
// then costs no wake-up of a reader goroutine and no hand-off to the Recv,
// like a raw TCP ping-pong. A Recv waits on the queue instead when another
// Recv holds the role or waits on the queue, when the reader goroutine is
// in the middle of a frame (it queues that frame), when the frame's receive
// budget is not free, and when its ctx can only be selected on (below).
//
// Large frames (over directMax) with the next frame already coming are the
// reader goroutine's (readAhead): after one, a Recv lets go of the role at
// once and takes it from the reader goroutine no more, until a small frame,
// or a large one with nothing behind it, comes. The reader goroutine then
// reads the next frame while the last one is being handled; a frame's
// hand-off costs little beside its copy and decoding, and reading every
// large frame in the Recv lost that overlap (64 KiB at 16 callers, RPC over
// separate processes: calls/s 2.2-2.9k against 2.8-4.1k,
// bench/results/history/2026-12-02-tcp-split). With nothing behind it (one
// call in flight) there is nothing to overlap, and the hand-off only cost
// wake-ups: 64 KiB at one caller, 4.3 voluntary context switches per call
// per end against 2.4 when its Recv reads it.
//
// The reader goroutine takes the role when a Recv waits on the queue, when
// the connection closes (to drain it), after a large frame with another
// behind it, and when the role has stayed free for idleRead: so with nobody
// in Recv the socket is still read (messages go to the queue, within
// RecvQueueBytes; OnArrival's callback, the peer's end, BytesReceived all
// move), at most twice idleRead late, and a Recv that comes back within
// idleRead, as in a ping-pong, takes the free role with no wake-up at all.
//
// A Recv blocked in read() must give up when its ctx ends: a ctx without
// Done needs nothing; a standard library context (WithCancel, WithTimeout,
// WithDeadline, and WithValue over one) gets a context.AfterFunc that
// interrupts the read, kept
// from one Recv to the next while the same ctx comes back. Any other ctx
// may deliver a value on Done (the RPC client's reader context does),
// which only a select can take, exactly once; context.AfterFunc would
// start a goroutine that takes it: such a Recv waits on the queue.
type holder uint8

const (
	heldByNone holder = iota // free
	heldByLoop               // the reader goroutine
	heldByRecv               // a Recv reading for itself
)

// idleRead is how long the role stays free before the reader goroutine
// takes it: how late a connection nobody reads notices a message
// (OnArrival) or its peer's end. A busy connection arms the timer at most
// once per idleRead.
const idleRead = time.Millisecond

// directMax is the largest frame after which a Recv keeps reading the
// socket itself whatever follows; see above.
const directMax = 16 << 10

// readDirectMin is the least of a frame's body still to come that is read
// from the socket straight into the body's buffer, bypassing the reader's
// buffer (which then holds nothing): below it, the copy costs less than the
// read of the next frame's first bytes that r would have taken along.
const readDirectMin = 16 << 10

// errInterrupted is a read given up because another wants the role, the
// holder's ctx ended or the connection is closing.
var errInterrupted = errors.New("tcp: read interrupted")

// errNoBudget: the frame's receive budget is not free; the reader goroutine
// waits for it, a Recv cannot (its ctx may need a select).
var errNoBudget = errors.New("tcp: receive budget in use")

// aLongTimeAgo is a read deadline that makes a blocked read return at once.
var aLongTimeAgo = time.Unix(1, 0)

// rstate is the frame being read, the role holder's.
type rstate struct {
	r       *bufio.Reader // over c's socketReader
	inFrame bool          // the frame's first byte is in: the rest must keep coming
	hdr     [frameHeaderLen]byte
	hdrGot  int
	n       int   // the body's length, once the header is in
	w       int64 // receive budget held for the body; 0: not yet
	body    []byte
	got     int
}

// socketReader is the socket as the role's holder reads it: it counts the
// bytes (BytesReceived), bounds each read in the middle of a frame by the
// stall timeout, and refuses to read, or stops a blocked read, once
// interrupted.
//
// The stall bound costs no timer per frame: the deadline is set 1.25 stall
// timeouts ahead and set again only when less than one is left, and it
// stays armed between frames, where, should it fire while the connection
// waits for a frame's first byte, it is cleared and the read goes on. Each
// deadline set wakes a thread of the runtime's poller when it is sooner
// than the poller's own wait: once per frame, that was a wake-up per call
// at 64 KiB. So a peer silent in the middle of a frame is let go after
// between one and 1.25 stall timeouts.
type socketReader struct{ c *conn }

func (s socketReader) Read(p []byte) (int, error) {
	c := s.c
	c.rmu.Lock()
	if c.intr || isClosed(c.done) {
		c.rmu.Unlock()
		return 0, errInterrupted
	}
	for {
		inFrame := c.rs.inFrame
		switch {
		case inFrame:
			if now := time.Now(); c.stallAt.IsZero() || c.stallAt.Sub(now) < c.stall {
				c.stallAt = now.Add(c.stall + c.stall/4)
				_ = c.nc.SetReadDeadline(c.stallAt)
				c.deadline = true
				c.stallArms++
			}
		case c.deadline && c.stallAt.IsZero():
			_ = c.nc.SetReadDeadline(time.Time{})
			c.deadline = false
		}
		c.idleRead = c.holder == heldByLoop && !inFrame
		c.rmu.Unlock()
		n, err := c.nc.Read(p)
		c.received.Add(uint64(n))
		c.rmu.Lock()
		c.idleRead = false
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			switch {
			case c.intr:
				err = errInterrupted
			case !inFrame:
				// A stall deadline left from the last frame: between
				// frames there is no bound.
				_ = c.nc.SetReadDeadline(time.Time{})
				c.deadline, c.stallAt = false, time.Time{}
				continue
			}
		}
		c.rmu.Unlock()
		return n, err
	}
}

// interrupt makes the role holder's read return errInterrupted, now or at
// its next read. Called with c.rmu held.
func (c *conn) interruptLocked() {
	if !c.intr {
		c.intr = true
		c.intrs++
		c.deadline, c.stallAt = true, time.Time{}
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
	}
}

// interrupt is interruptLocked for a ctx's end or the connection's
// closing (context.AfterFunc).
func (c *conn) interrupt() {
	c.rmu.Lock()
	if c.holder != heldByNone {
		c.interruptLocked()
	}
	c.rmu.Unlock()
}

// uninterruptLocked takes an interruption up: the next read reads. Its
// deadline is set by the read itself. Called with c.rmu held.
func (c *conn) uninterruptLocked() { c.intr = false }

// next reads the rest of the frame in c.rs. On an error what was read
// stays in c.rs for the next holder. wait: the reader goroutine waits for
// the receive budget; a Recv gets errNoBudget instead.
func (c *conn) next(wait bool) (transport.Buffer, error) {
	s := &c.rs
	if !s.inFrame {
		// The next frame may be long in coming (an idle connection);
		// once its first byte is here, the rest must keep coming.
		if _, err := s.r.Peek(1); err != nil {
			return transport.Buffer{}, err
		}
		s.inFrame = true
	}
	for s.hdrGot < frameHeaderLen {
		k, err := s.r.Read(s.hdr[s.hdrGot:])
		s.hdrGot += k
		if err != nil {
			return transport.Buffer{}, c.why(err)
		}
	}
	s.n = int(binary.BigEndian.Uint32(s.hdr[:]))
	if s.n > c.maxRecv {
		return transport.Buffer{}, fmt.Errorf("%w: peer sent a %d-byte frame, over the %d-byte limit", transport.ErrProtocol, s.n, c.maxRecv)
	}
	if s.w == 0 {
		w := budget(s.n, c.recvCap)
		if !c.recvBudget.TryAcquire(w) {
			if !wait {
				return transport.Buffer{}, errNoBudget
			}
			// A Recv that asked for the role does not wait for the budget
			// too: it gets the role, and errNoBudget.
			c.rmu.Lock()
			wanted := c.want
			c.rmu.Unlock()
			if wanted {
				return transport.Buffer{}, errInterrupted
			}
			if err := c.recvBudget.Acquire(c.ctx, w); err != nil {
				return transport.Buffer{}, errInterrupted // closing
			}
		}
		s.w = w
	}
	// The body is allocated as it arrives (see readChunk).
	if s.body == nil {
		s.body = bufpool.Get(min(s.n, readChunk))
		c.frameBytes.Add(uint64(cap(s.body)))
	}
	for s.got < s.n {
		if s.got == len(s.body) {
			// Full, and more is announced: grow it fourfold, up to n.
			nb := bufpool.Get(min(4*s.got, s.n))
			c.frameBytes.Add(uint64(cap(nb)))
			copy(nb, s.body)
			bufpool.Put(s.body)
			s.body = nb
		}
		p := s.body[s.got:]
		var k int
		var err error
		if s.r.Buffered() == 0 && len(p) >= readDirectMin {
			// Straight into the body: through r, a read shorter than
			// r's buffer lands there first and is copied.
			k, err = socketReader{c}.Read(p)
		} else {
			k, err = s.r.Read(p)
		}
		s.got += k
		if err != nil {
			return transport.Buffer{}, c.why(err)
		}
	}
	b := transport.NewBuffer(s.body, recvOwner{c}, uint64(s.w))
	*s = rstate{r: s.r}
	return b, nil
}

// readAhead reports whether the reader goroutine reads on after the frame
// b, which the role's holder just read: b is large and the next frame is
// already coming (bytes wait in the reader's buffer or in the socket), so
// reading it overlaps with b's handling. A large frame with nothing behind
// it (one call in flight) leaves the role to the next Recv, as a small one
// does: reading ahead there only added a hand-off per message.
func (c *conn) readAhead(b transport.Buffer) bool {
	if b.Len() <= directMax {
		return false
	}
	if c.rs.r.Buffered() > 0 || c.sock == nil {
		return true
	}
	return c.sock.unread()
}

// why names a read that timed out in the middle of a frame.
func (c *conn) why(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the peer stopped in the middle of a message (no byte for %v)", transport.ErrProtocol, c.stall)
	}
	return err
}

// drop frees the partial frame once nobody will read on.
func (s *rstate) drop(c *conn) {
	if s.body != nil {
		bufpool.Put(s.body)
	}
	if s.w != 0 {
		c.recvBudget.Release(s.w)
	}
	*s = rstate{r: s.r}
}

// readLoop is the reader goroutine: it holds the role when it is wanted
// and reads frames into recvq until a Recv takes the role, until the
// stream ends or fails, or until the connection closes (then it drains
// what the peer still sends, see discard).
func (c *conn) readLoop() {
	defer c.wg.Done()
	defer close(c.recvq)
	done := c.done
	for {
		c.rmu.Lock()
		for c.holder != heldByNone || !(c.loopWanted || isClosed(c.done)) {
			c.rmu.Unlock()
			select {
			case <-c.lwake:
				c.rmu.Lock()
			case <-c.idle.C:
				c.rmu.Lock()
				c.idleFiredLocked()
			case <-done:
				done = nil // if a Recv holds the role, its release wakes us
				c.rmu.Lock()
			}
		}
		c.holder = heldByLoop
		c.readBehind.Store(false) // what is read now goes to recvq
		c.loopWanted = false
		if c.idleArmed {
			// Only a free role needs watching; the next release arms
			// it again.
			c.idleArmed = false
			c.idle.Stop()
		}
		c.rmu.Unlock()
		if !c.loopRead() {
			return
		}
	}
}

// loopRead reads frames into recvq while the reader goroutine holds the
// role: true when it gave the role to a Recv, false when reading is over.
func (c *conn) loopRead() bool {
	for {
		c.rmu.Lock()
		closing := isClosed(c.done)
		if c.want && !closing {
			c.want = false
			c.holder = heldByRecv
			c.uninterruptLocked()
			c.rfree <- struct{}{} // never blocks: one want at a time
			c.rmu.Unlock()
			return true
		}
		if closing {
			c.want = false // that Recv finds recvq closed
			failed := c.rfailed
			c.rmu.Unlock()
			c.arrive(true)
			if !failed {
				c.discard()
			}
			c.rs.drop(c)
			return false
		}
		c.uninterruptLocked() // a late one, for a ctx that is gone
		c.rmu.Unlock()
		b, err := c.next(true)
		switch {
		case err == nil:
			c.large.Store(c.readAhead(b))
			select {
			case c.recvq <- b:
				c.arrive(false)
			case <-c.done:
				b.Release()
			}
		case errors.Is(err, errInterrupted):
			// The loop's top: a Recv wants the role, or closing.
		default:
			c.rmu.Lock()
			c.rfailed = true
			c.rmu.Unlock()
			c.readFailed(err)
		}
	}
}

// wakeLoopLocked asks the reader goroutine to take the role once it is
// free. Called with c.rmu held.
func (c *conn) wakeLoopLocked() {
	c.loopWanted = true
	select {
	case c.lwake <- struct{}{}:
	default:
	}
}

// releaseLocked frees a Recv's role: to the reader goroutine at once when
// a Recv waits on the queue, the connection is closing or the last frame
// was large, else after idleRead unless a Recv takes it first (the idle
// timer, unless it runs already). Called with c.rmu held.
func (c *conn) releaseLocked() {
	c.readBehind.Store(c.rs.inFrame || c.rs.r.Buffered() > 0)
	c.holder = heldByNone
	c.releases++
	if c.qwaiters > 0 || isClosed(c.done) || c.large.Load() {
		c.wakeLoopLocked()
		return
	}
	if !c.idleArmed {
		c.idleArmed = true
		c.idleSeen = c.releases
		c.idle.Reset(idleRead)
	}
}

// idleFiredLocked is the reader goroutine's look at the role when the idle
// timer fired: a role that stayed free for idleRead is the reader
// goroutine's now; one released meanwhile gets another idleRead, whether
// it is free or held again (a busy connection, as in a ping-pong, whose
// releases then arm nothing: the timer goes on from here, on the goroutine
// it woke, instead of being armed anew by a release, which wakes a thread
// for the runtime's poller each time); one held since the last look lets
// the timer stop, and its release arms it again. Called with c.rmu held.
func (c *conn) idleFiredLocked() {
	c.idleArmed = false
	switch {
	case c.releases != c.idleSeen:
		c.idleArmed = true
		c.idleSeen = c.releases
		c.idle.Reset(idleRead)
	case c.holder == heldByNone:
		c.loopWanted = true
	}
}

// Contexts whose Done is closed, never delivers a value, and on which
// context.AfterFunc starts no goroutine; and the context.WithValue type,
// whose Done is its parent's.
var (
	stdCtxTypes = func() [2]reflect.Type {
		c, cancel := context.WithCancel(context.Background())
		cancel()
		t, cancel := context.WithTimeout(context.Background(), time.Hour)
		cancel()
		return [2]reflect.Type{reflect.TypeOf(c), reflect.TypeOf(t)}
	}()
	valueCtxType = reflect.TypeOf(context.WithValue(context.Background(), valueKey{}, 0))
)

type valueKey struct{}

// watchable reports whether a Recv on ctx may block in read(): ctx never
// ends, or it is a standard context whose end an AfterFunc can watch, maybe
// under context.WithValue layers (metadata, as a gRPC-style caller's).
func watchable(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	for {
		switch reflect.TypeOf(ctx) {
		case stdCtxTypes[0], stdCtxTypes[1]:
			return true
		case valueCtxType:
			// Its embedded parent, the field named Context.
			ctx = reflect.ValueOf(ctx).Elem().Field(0).Interface().(context.Context)
		default:
			return false
		}
	}
}

// watchLocked makes sure ctx's end interrupts the holder's read. The last
// registration is kept: the same ctx coming back costs nothing. Called
// with c.rmu held.
func (c *conn) watchLocked(ctx context.Context) {
	if ctx.Done() == nil || ctx == c.watchCtx {
		return
	}
	if c.watchStop != nil {
		c.watchStop()
	}
	c.watchCtx = ctx
	c.watchStop = context.AfterFunc(ctx, c.interruptFn)
}

// unwatch drops the ctx registration, when the connection is torn down.
func (c *conn) unwatch() {
	c.rmu.Lock()
	if c.watchStop != nil {
		c.watchStop()
	}
	c.watchCtx, c.watchStop = nil, nil
	c.rmu.Unlock()
}

// directReads reports whether Recvs on nc may read it themselves: sockets,
// whose reads resume cleanly after a deadline interrupted them (a TLS
// connection's do not).
func directReads(nc net.Conn) bool {
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// recvDirect receives the next frame reading the socket itself, holding
// the role; ok false: it did not, the caller waits on the queue.
func (c *conn) recvDirect(ctx context.Context) (b transport.Buffer, err error, ok bool) {
	c.rmu.Lock()
	if c.qwaiters > 0 || isClosed(c.done) {
		c.rmu.Unlock()
		return b, nil, false
	}
	switch c.holder {
	case heldByNone:
		c.holder = heldByRecv
	case heldByLoop:
		if c.want || !c.idleRead || c.large.Load() {
			c.rmu.Unlock()
			return b, nil, false // it queues the frame it is reading, or reads ahead
		}
		// The reader goroutine waits for a frame's first byte: interrupt
		// it; it hands the role over at once. A frame it queued meanwhile
		// (it was already reading one) is taken instead.
		c.want = true
		c.interruptLocked()
		c.rmu.Unlock()
		select {
		case <-c.rfree:
			c.rmu.Lock()
		case q, open := <-c.recvq:
			c.rmu.Lock()
			if c.want {
				c.want = false // not handed over: the reader goroutine reads on
			} else if open {
				<-c.rfree // handed over as the frame came: give it back
				c.releaseLocked()
			}
			c.rmu.Unlock()
			if !open {
				return b, nil, false
			}
			return q, nil, true
		}
	default:
		c.rmu.Unlock()
		return b, nil, false
	}
	c.watchLocked(ctx)
	for {
		// Frames the reader goroutine queued before it let go come first.
		select {
		case q, open := <-c.recvq:
			c.releaseLocked()
			c.rmu.Unlock()
			if !open {
				return b, nil, false
			}
			return q, nil, true
		default:
		}
		if err = ctx.Err(); err != nil {
			c.releaseLocked()
			c.rmu.Unlock()
			return b, err, true
		}
		if isClosed(c.done) {
			c.releaseLocked()
			c.rmu.Unlock()
			return b, nil, false // the queue gives what is left, then the error
		}
		c.rmu.Unlock()
		b, err = c.next(false)
		ahead := err == nil && c.readAhead(b)
		c.rmu.Lock()
		switch {
		case err == nil:
			c.large.Store(ahead)
			c.releaseLocked()
			c.rmu.Unlock()
			return b, nil, true
		case err == errNoBudget:
			// The reader goroutine waits for it, for the queue.
			c.qwaiters++ // so that the release wakes it; recvQueued counts itself
			c.releaseLocked()
			c.qwaiters--
			c.rmu.Unlock()
			return b, nil, false
		case errors.Is(err, errInterrupted):
			c.uninterruptLocked() // the loop's top: ctx, closing, or a late watch (read on)
		default:
			c.rfailed = true
			c.rmu.Unlock()
			c.readFailed(err) // before the release, which then wakes the reader to end
			c.rmu.Lock()
			c.releaseLocked()
			c.rmu.Unlock()
			return b, nil, false // the queue gives what is left, then the error
		}
	}
}

// recvQueued waits for a frame the reader goroutine reads.
func (c *conn) recvQueued(ctx context.Context) (transport.Buffer, error) {
	c.rmu.Lock()
	c.qwaiters++
	if c.holder == heldByNone {
		c.wakeLoopLocked()
	}
	c.rmu.Unlock()
	defer func() {
		c.rmu.Lock()
		c.qwaiters--
		c.rmu.Unlock()
	}()
	select {
	case b, ok := <-c.recvq:
		if !ok {
			return transport.Buffer{}, c.closeErr()
		}
		return b, nil
	case <-c.local.Done():
		return transport.Buffer{}, c.closeErr()
	case <-ctx.Done():
		return transport.Buffer{}, ctx.Err()
	}
}

// OnArrival implements transport.Arrivals: f is called by the reader
// goroutine when it queues a frame nobody waited for in Recv, or when the
// connection ends. A frame counts as queued already when a Recv let go of
// the role with bytes of it read into the reader's buffer: they would wait
// there, with no arrival to come, until the reader goroutine's idle look
// (idleRead). The peer then sends without waiting for an answer (a flood),
// and a caller that would leave the connection unread hands the reading
// on instead.
func (c *conn) OnArrival(f func()) bool {
	c.amu.Lock()
	defer c.amu.Unlock()
	if f == nil {
		c.arrival = nil
		return true
	}
	if len(c.recvq) > 0 || c.ended || c.readBehind.Load() {
		return false
	}
	c.arrival = f
	return true
}

// arrive calls the arrival callback, if any, once, after a frame was
// queued (unless a Recv has taken it already); end: the connection ends,
// and later OnArrivals report false.
func (c *conn) arrive(end bool) {
	c.amu.Lock()
	defer c.amu.Unlock()
	c.ended = c.ended || end
	if !end && len(c.recvq) == 0 {
		// A Recv waiting on the queue took the frame: nobody is to be
		// told, and a callback armed since (by that Recv's caller,
		// done with it) would be told of a frame it has had.
		return
	}
	if f := c.arrival; f != nil {
		c.arrival = nil
		f()
	}
}
