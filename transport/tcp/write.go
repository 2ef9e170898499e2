package tcp

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
)

// The send path combines writes without a hand-off when it can. One
// goroutine at a time holds the writer's role (conn.writing, under wmu):
//
//   - A sender that finds nobody writing takes the role and writes its frame
//     itself (combine), with a non-blocking writev, when the frame looks
//     like an answer: bytes arrived from the peer since a sender last wrote
//     itself, and no received message waits for Recv. In a ping-pong that
//     is every frame, so there is no goroutine between Send and the socket.
//     Frames that other senders queue meanwhile it writes too, all of them
//     in one writev per round, so concurrent senders still share system
//     calls. Any other frame is part of a burst (more messages to answer
//     are waiting, or nothing was heard since the last direct write): it
//     goes to the writer goroutine, whose wake-up lets the burst gather into
//     one writev. Writing every frame directly cost 4× the CPU per round
//     trip at 16 concurrent callers (BenchmarkPingPong): a system call and a
//     segment per frame, and a read per segment at the peer.
//   - The writer goroutine (writeLoop) takes the role when a sender hands it
//     over: when the socket does not take everything at once (the peer
//     reads slowly, or not at all), after maxCombine rounds, or when the
//     connection is closing. It writes with blocking writes, so only it ever
//     waits for the peer, and lets the role go once the queue is empty.
//     Before a short batch it yields once, so that senders about to queue
//     join it (gather).
//   - On connections that are not sockets (TLS, pipes: no non-blocking
//     write), every frame is handed to the writer goroutine, as before.
//   - A frame given in parts the sender keeps (SendVec) is written from
//     them only by its own sender, when it takes the role to write its
//     frame itself as above; a frame that would wait in the queue is
//     copied first, and when the socket takes it only in part, the rest is
//     copied before the role leaves the sender (ownVec). So a large
//     message goes from the caller's memory to the socket without a copy
//     when it can go at once, and nothing refers to that memory once
//     SendVec returns.
//
// No sender ever waits for the socket or for another goroutine (its only
// wait is for send budget, in acquireSend, with its context), so combining
// cannot deadlock; the writer goroutine's only wait other than the socket
// is for the role at close, which a holder hands over at its next look at
// the queue, a bounded number of non-blocking writes away.

// maxCombine bounds the rounds a sender writes before it hands the role to
// the writer goroutine: under a steady stream of frames from others, its
// own Send returns after a bounded amount of work.
const maxCombine = 4

// writeState is what the holder of the writer's role works on; only the
// holder touches it (the role passes under wmu, or through wnotify).
type writeState struct {
	d     *direct      // non-blocking writes; nil: the writer goroutine writes everything
	batch []frame      // the frames being written
	hdrs  []byte       // their length prefixes
	bufs  net.Buffers  // headers and bodies of batch, in order
	left  net.Buffers  // what of bufs is still to be written
	out   *net.Buffers // WriteTo's copy of left, made once (writev keeps a pointer to it)
	err   error        // a write failed: what is left is dropped

	// What the tests look at (under wmu, while nobody holds the role).
	direct    uint64 // batches a sender began to write itself
	handedOff uint64 // role hand-offs to the writer goroutine
	held      uint64 // batches the writer goroutine wrote
}

func (w *writeState) init(nc net.Conn) {
	w.d = newDirect(nc)
	w.out = new(net.Buffers)
}

// prepare lays out batch as one vector of headers and bodies.
func (w *writeState) prepare() {
	w.hdrs = w.hdrs[:0]
	w.bufs = w.bufs[:0]
	for _, f := range w.batch {
		w.hdrs = binary.BigEndian.AppendUint32(w.hdrs, uint32(f.n))
	}
	for i, f := range w.batch {
		w.bufs = append(w.bufs, w.hdrs[i*frameHeaderLen:(i+1)*frameHeaderLen])
		for _, b := range f.vec {
			if len(b) > 0 {
				w.bufs = append(w.bufs, b)
			}
		}
		if len(f.b) > 0 {
			w.bufs = append(w.bufs, f.b)
		}
	}
	w.left = w.bufs
}

// consume drops the first n written bytes from left.
func (w *writeState) consume(n int) {
	for n > 0 {
		if n < len(w.left[0]) {
			w.left[0] = w.left[0][n:]
			return
		}
		n -= len(w.left[0])
		w.left = w.left[1:]
	}
}

// releaseBatch gives the batch's budget and buffers back, written or dropped.
func (c *conn) releaseBatch() {
	w := &c.w
	clear(w.bufs)
	w.left = nil
	for i, f := range w.batch {
		c.release(f)
		w.batch[i] = frame{}
	}
	w.batch = w.batch[:0]
}

// enqueue sends f: it writes f itself when nobody is writing, the
// connection can be written without blocking and f looks like an answer
// (see above), else it queues f for the role's holder. A nil error means f is on its way; what a failed write
// loses shows as the connection's failure.
func (c *conn) enqueue(f frame) error {
	c.wmu.Lock()
	select {
	case <-c.done:
		c.wmu.Unlock()
		c.release(f)
		return c.closeErr()
	default:
	}
	if c.writing {
		c.wqueue = append(c.wqueue, f)
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	if c.answerLocked() {
		c.wmu.Unlock()
		return c.writeOwn(f)
	}
	c.wqueue = append(c.wqueue, f)
	c.wmu.Unlock()
	c.handOff()
	return nil
}

// answerLocked reports whether a sender that takes the free role writes
// its frame itself: the connection can be written without blocking and
// the frame looks like an answer (see above). It records that it does.
// The caller holds wmu.
func (c *conn) answerLocked() bool {
	rcv := c.received.Load()
	if c.w.d == nil || rcv == c.lastDirect || len(c.recvq) != 0 {
		return false
	}
	c.lastDirect = rcv
	return true
}

// writeOwn writes f, as the sender that took the role to write it itself.
func (c *conn) writeOwn(f frame) error {
	c.w.direct++
	c.w.batch = append(c.w.batch, f) // empty: the last holder released it
	return c.combine()
}

// enqueueVec sends the frame made of bufs, n bytes, as enqueue sends one:
// when enqueue would have its sender write it, the sender writes it from
// bufs; otherwise (another goroutine holds the role, or the frame goes to
// the writer goroutine) it is copied into pooled memory first, since the
// caller may reuse bufs as soon as SendVec returns. What the socket does
// not take of a frame written from bufs is copied before the role leaves
// its sender (ownVec).
func (c *conn) enqueueVec(bufs [][]byte, n int) error {
	c.wmu.Lock()
	if !c.writing && !isClosed(c.done) && c.answerLocked() {
		c.writing = true
		c.wmu.Unlock()
		return c.writeOwn(frame{vec: bufs, n: n})
	}
	c.wmu.Unlock()
	b := bufpool.Get(n)
	off := 0
	for _, p := range bufs {
		off += copy(b[off:], p)
	}
	c.vecCopied.Add(uint64(n))
	return c.enqueue(pooledFrame(b))
}

// ownVec copies what is left to write of a frame its sender writes from
// its own parts (SendVec) into pooled memory, before the role leaves that
// sender: the role's next holder then writes the copy, and nothing refers
// to the parts once SendVec returns. Such a frame is alone in the first
// round's batch (writeOwn), so what is left of the batch is what is left
// of it. The holder calls it, so nobody else reads the batch meanwhile.
func (c *conn) ownVec() {
	w := &c.w
	if len(w.batch) == 0 || w.batch[0].vec == nil {
		return
	}
	r := 0
	for _, p := range w.left {
		r += len(p)
	}
	b := bufpool.Get(r)
	off := 0
	for _, p := range w.left {
		off += copy(b[off:], p)
	}
	clear(w.bufs)
	w.bufs = append(w.bufs[:0], b)
	w.left = w.bufs
	f := &w.batch[0]
	f.b, f.vec, f.pooled = b, nil, true
	c.vecCopied.Add(uint64(r))
}

// handOff passes the writer's role, and what is left of the batch, to the
// writer goroutine.
func (c *conn) handOff() {
	c.w.handedOff++
	c.wnotify <- struct{}{}
}

// combine writes, as the holder of the writer's role, the batch in c.w and
// then, a round at a time, what other senders queued meanwhile, without
// ever waiting for the socket. It returns an error only when the first
// round, the caller's own frame, failed.
func (c *conn) combine() error {
	for round := 0; ; round++ {
		c.w.prepare()
		for len(c.w.left) > 0 {
			n, wouldBlock, err := c.w.d.write(c.w.left)
			if err != nil {
				c.w.err = fmt.Errorf("tcp: write: %w", err)
				c.fail(c.w.err)
				c.ownVec()
				c.handOff() // the writer goroutine drops what is left
				if round == 0 {
					return c.closeErr()
				}
				return nil
			}
			c.w.consume(n)
			if wouldBlock && len(c.w.left) > 0 {
				c.ownVec()
				c.handOff() // the writer goroutine waits for the socket
				return nil
			}
		}
		c.releaseBatch()
		c.wmu.Lock()
		closing := isClosed(c.done)
		if len(c.wqueue) == 0 && !closing {
			c.writing = false
			c.wmu.Unlock()
			return nil
		}
		if closing || round+1 == maxCombine {
			c.wmu.Unlock()
			c.handOff()
			return nil
		}
		c.w.batch, c.wqueue = c.wqueue, c.w.batch
		c.wmu.Unlock()
	}
}

// gather yields the processor once before the writer goroutine writes a
// short batch, then takes what was queued meanwhile into it: goroutines
// about to send (other streams' handlers, other callers) queue their frames
// behind it and share its system call. Without it, 16 ping-pong streams
// cost a writev per message at each end (0.9 against gRPC-go's 0.2, whose
// writer yields the same way) and 1.2× gRPC-go's CPU per message. A large
// batch is written at once: its copy, not the system call, is the cost.
// Senders that write their own frame (combine) do not yield: at one call
// in flight nothing would join them, and the yield cost context switches.
func (c *conn) gather() {
	if len(c.w.batch) == 0 || len(c.w.batch) >= gatherFrames {
		return
	}
	n := 0
	for _, f := range c.w.batch {
		n += f.n
	}
	if n >= gatherBelow {
		return
	}
	runtime.Gosched()
	c.wmu.Lock()
	c.w.batch = append(c.w.batch, c.wqueue...)
	clear(c.wqueue)
	c.wqueue = c.wqueue[:0]
	c.wmu.Unlock()
}

// The writer goroutine yields before writing a batch of fewer than
// gatherFrames frames and gatherBelow bytes (gather). A longer batch
// already shares its system call; yielding before each one cost a flood of
// 64-byte messages on one stream a tenth of its rate.
const (
	gatherFrames = 4
	gatherBelow  = 16 << 10
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// writeLoop takes the writer's role whenever a sender hands it over, and
// writes until the queue is empty, until the connection closes; then it
// flushes what is left (within the close grace period) and half-closes the
// stream so the peer sees a clean end.
func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.wnotify:
			if err := c.writeHeld(); err != nil {
				c.fail(err)
				c.dropWrites()
				return
			}
		case <-c.done:
			c.closeWrites()
			return
		}
	}
}

// writeHeld writes, as the holder of the role, what is left of the batch
// and then everything queued, waiting for the socket as it must; it lets
// the role go once the queue is empty.
func (c *conn) writeHeld() error {
	for {
		if c.w.err != nil {
			return c.w.err
		}
		if len(c.w.left) > 0 {
			c.w.held++
			// WriteTo consumes the slice it is called on: out is the
			// copy, so bufs keeps its backing array for the next batch.
			*c.w.out = c.w.left
			if _, err := c.w.out.WriteTo(c.nc); err != nil {
				c.w.err = fmt.Errorf("tcp: write: %w", err)
				return c.w.err
			}
		}
		c.releaseBatch()
		c.wmu.Lock()
		if len(c.wqueue) == 0 {
			c.writing = false
			c.wmu.Unlock()
			return nil
		}
		c.w.batch, c.wqueue = c.wqueue, c.w.batch
		c.wmu.Unlock()
		c.gather()
		c.w.prepare()
	}
}

// closeWrites takes the writer's role (a sender holding it hands it over
// when it next looks at the queue and sees the connection closing), writes
// what sends that returned before Close left, within the grace period, and
// half-closes the stream.
func (c *conn) closeWrites() {
	c.wmu.Lock()
	held := c.writing
	c.writing = true // from here, enqueue refuses (the connection is closed)
	c.wmu.Unlock()
	if held {
		<-c.wnotify
	}
	// Sends that returned before Close are delivered if the peer takes
	// them within the grace period.
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.grace))
	if c.writeHeld() == nil {
		closeWrite(c.nc)
	}
	c.dropWrites()
}

// dropWrites drops what the writer will not write: the rest of a failed
// batch and frames queued behind it.
func (c *conn) dropWrites() {
	c.releaseBatch()
	c.wmu.Lock()
	q := c.wqueue
	c.wqueue = nil
	c.wmu.Unlock()
	for _, f := range q {
		c.release(f)
	}
}

// release gives back what f held: its budget, and its memory if pooled.
func (c *conn) release(f frame) {
	c.sendBudget.Release(budget(f.n, c.sendCap))
	if f.pooled {
		bufpool.Put(f.b)
	}
}
