package rdma

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// completions is the completion handling of a connection, done by
// whichever goroutine holds the pmu of its completion queue (cqs.queue()):
// a Recv (or a send waiting for credits or slots) polls the queue itself;
// the layout's poller goroutine handles what comes while nobody does.
// Whenever pmu is free the queue is armed, so no completion waits for
// somebody to poll.
type completions struct {
	cqs     completionLayout
	reposts []int32 // pmu's

	bytesIn atomic.Uint64 // bytes of every completed receive: payload and immediate

	// The round trip this connection observes, for how long a waiter
	// polls: a message sent, the next one received (times since the
	// receiver's epoch).
	sentAt  atomic.Int64  // since epoch, when the last message left; 0: not timed
	sends   atomic.Uint32 // messages sent, for timing one round trip in rttEvery
	expect  atomic.Bool   // a message left and none has arrived since
	bigSend atomic.Bool   // the last message left in fragments: do not spin for its reply
	rtt     atomic.Int64  // moving average of the round trip, ns
}

// spinCheckEvery is how many polls of an empty queue pass between two
// reads of the clock while spinning (a clock read costs microseconds under
// emulation).
const spinCheckEvery = 16

// streamSpin is how long the goroutine that holds the completion queue
// keeps polling after it handled completions while no reply is awaited —
// a stream of fragments, credit returns, send completions — so that each
// one does not cost an event and a wake-up (the transport's poller did
// this before waiters polled themselves).
const streamSpin = 20 * time.Microsecond

// await waits until w is closed, stop is closed or ctx is done, making sure
// meanwhile that completions get handled: when nobody else holds the
// completion queue, the waiter polls it itself (spinning, with spin, for
// about the round trip when a reply is expected), and returns at once when
// it handled something, for the caller to look again. Otherwise it sleeps;
// the goroutine that holds the queue, or the poller, handles what comes.
func (c *conn) await(ctx context.Context, w chan struct{}, stop <-chan struct{}, spin bool) error {
	if c.cqs.queue().drive(c, w, spin) || c.cqs.watch(c, w, spin) {
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

// spinNow is how long the holder of the completion queue polls on for a
// waiter (spin: one that may spin for a reply): about the round trip
// while a reply is expected, streamSpin between the fragments of a
// message, else not at all. Called with the queue's pmu held.
func (c *conn) spinNow(spin bool) time.Duration {
	switch {
	case spin && c.spinWorthIt():
		return c.spinBudget()
	case c.asm.buf != nil && c.o.PollSpin > 0:
		return streamSpin // between the fragments of a message
	}
	return 0
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

// rttEvery: one round trip in this many is timed once the average is
// known. A clock read costs microseconds under emulation, and the one at
// the receive was on the message's path, on both sides of every round trip.
const rttEvery = 8

// noteSent records that a whole message left (fragmented or not), and when,
// if this round trip is timed.
func (c *conn) noteSent(fragmented bool) {
	at := int64(0)
	if c.sends.Add(1)%rttEvery == 0 || c.rtt.Load() == 0 {
		at = max(1, int64(time.Since(c.epoch)))
	}
	c.sentAt.Store(at)
	c.bigSend.Store(fragmented)
	c.expect.Store(true)
}

// noteReceived records that a whole message arrived: the first after a
// timed send closes a round trip, which moves the average (by 1/8).
func (c *conn) noteReceived() {
	if !c.expect.Swap(false) {
		return
	}
	at := c.sentAt.Load()
	if at == 0 {
		return
	}
	rtt := int64(time.Since(c.epoch)) - at
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

// completed is the connection's handler of a batch of its completions,
// called by whoever holds its completion queue (on a shared queue, the
// group's dispatch hands it its own).
func (c *conn) completed(wcs []verbs.WorkCompletion) {
	switch {
	case c.destroying.Load():
		// A handshake that failed: only shared receive buffers matter,
		// they go back to the pool.
		for i := range wcs {
			if isRecv(&wcs[i]) {
				c.takenLost(&wcs[i])
			}
		}
	case c.closing.Load():
		c.handleClosing(wcs)
		c.pokeTeardown()
	default:
		c.reposts = c.handle(wcs, c.reposts[:0])
		c.flushUnposted()
		if c.closing.Load() {
			c.pokeTeardown()
		}
	}
}

// pokeTeardown tells a teardown waiting in a shared layout's drain that
// some of the connection's completions were handled.
func (c *conn) pokeTeardown() {
	select {
	case c.tdWake <- struct{}{}:
	default:
	}
}

// handle processes a batch of completions; data receives that can be
// posted again at once are posted in one batch at the end.
func (c *conn) handle(wcs []verbs.WorkCompletion, reposts []int32) []int32 {
	sendsDone, lastSend := false, uint64(0)
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			c.wcFailed(wc)
			return c.handledBefore(wcs[i+1:], reposts, sendsDone, lastSend)
		}
		if !isRecv(wc) {
			// Sends complete in order: the last one of the batch frees
			// all, under one lock.
			c.t.counters.sendCompletions.Add(1)
			sendsDone, lastSend = true, wc.ID
			if wc.Opcode != verbs.WCRDMARead {
				continue
			}
			if n, last, ok := c.readCompleted(wc.ID); ok {
				c.bytesIn.Add(uint64(n)) // per chunk: a long read is a sign of life
				if !last {
					continue // its next chunk: sendCompleted, below
				}
				if err := c.readDone(); err != nil {
					c.t.counters.protocolErrors.Add(1)
					c.fail(err)
					return c.handledBefore(wcs[i+1:], reposts, sendsDone, lastSend)
				}
			}
			continue
		}
		c.t.counters.recvCompletions.Add(1)
		c.recvOutstanding.Add(-1)
		c.bytesIn.Add(uint64(wc.ByteLen) + immBytes)
		var err error
		if reposts, err = c.received(wc, reposts); err != nil {
			c.t.counters.protocolErrors.Add(1)
			c.log.Warn("closing connection: peer broke the protocol", zap.Error(err))
			c.fail(err)
			return c.handledBefore(wcs[i+1:], reposts, sendsDone, lastSend)
		}
	}
	if len(reposts) > 0 {
		c.repost(reposts)
	}
	if sendsDone {
		ctl, reply, put, read := c.sendCompleted(lastSend)
		if ctl {
			c.sendCreditOnly()
		}
		if reply {
			c.sendOwedReply()
		}
		if put {
			c.putInvalidated()
		}
		if read {
			_ = c.flush() // a failure closed the connection (flush)
		}
	}
	if c.pool != nil {
		c.pool.growIfWanted()
	}
	return reposts
}

// handledBefore finishes a batch that a failure cut short (the connection
// is closing): the buffers and sends of the completions before it are
// accounted for as usual, the rest as the teardown does (handleClosing).
// Dropping them left the teardown waiting its whole grace period for
// sends that had completed.
func (c *conn) handledBefore(rest []verbs.WorkCompletion, reposts []int32, sendsDone bool, lastSend uint64) []int32 {
	if len(reposts) > 0 {
		c.repost(reposts)
	}
	if sendsDone {
		c.sendCompleted(lastSend)
	}
	c.handleClosing(rest)
	return reposts
}

// immBytes is what a message's immediate data adds to BytesReceived: a
// credit-only message has no payload, yet it is the peer's sign of life
// while it only receives (returning credits is all it sends).
const immBytes = 4

// received handles one receive completion: the credits it grants (and
// lends) go to the sender, what it carries to the receiver.
func (c *conn) received(wc *verbs.WorkCompletion, reposts []int32) ([]int32, error) {
	buf := int32(wc.ID &^ recvTag)
	if !wc.HasImm {
		return reposts, protoErr("a message without immediate data")
	}
	k, grant, field, err := decodeImmLend(wc.Imm, c.lends)
	if err != nil {
		return reposts, err
	}
	if (k == kindAsk || k == kindAnswer) && !c.answers {
		return reposts, protoErr("a message of kind %v from a peer that did not offer asks", k)
	}
	lend, back := field, 0
	if k == kindGiveBack {
		lend, back = 0, field
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
	// A rendezvous reply owed for want of a credit goes once a grant
	// comes. While the peer waits for that reply it holds its turn, so
	// the grant may come in a credit-only message.
	replyOwed := false
	if k == kindCredit || grant > 0 || lend > 0 {
		var err error
		if replyOwed, err = c.granted(k == kindCredit, grant, lend); err != nil {
			return reposts, fmt.Errorf("%w: %w", transport.ErrProtocol, err)
		}
	}
	if k == kindCredit {
		if replyOwed {
			c.sendOwedReply()
		}
		return reposts, nil
	}
	repost, rv, err := c.accept(wc, buf, k, back)
	if repost {
		reposts = append(reposts, buf)
	}
	if err == nil && rv.k != 0 {
		err = c.rendezvousArrived(rv)
	}
	if replyOwed && err == nil {
		c.sendOwedReply()
	}
	return reposts, err
}

// wcFailed handles a failed completion: flushes are expected while closing;
// anything else breaks the connection.
func (c *conn) wcFailed(wc *verbs.WorkCompletion) {
	if isRecv(wc) {
		c.recvOutstanding.Add(-1)
		c.postLost(wc)
	}
	if wc.Status == verbs.WCWRFlushErr && c.sig.IsSet() {
		return
	}
	c.t.counters.wcError(wc.Status)
	err := wc.Err()
	if !isRecv(wc) && c.isReadWR(wc.ID) {
		err = rndvReadFailed(err)
		c.log.Warn("closing connection", zap.Error(err))
	} else if wc.Status == verbs.WCRNRRetryExcErr {
		// Credits make this impossible: it is a bug, say so loudly.
		c.log.Error("receiver not ready: a send found no posted receive (a credit accounting bug)", zap.Error(err))
	} else {
		c.log.Warn("closing connection: work request failed", zap.Error(err))
	}
	c.fail(fmt.Errorf("work request failed: %w", err))
}
