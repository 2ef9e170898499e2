package rdma

import (
	"context"

	"github.com/rdmarpc/rdmarpc/transport"
)

// TrySend sends msg at once when it can go without waiting, and reports
// false, sending nothing, when it would have to wait
// (transport.TrySender): for the turn, for a rendezvous being read or an
// abort owed ahead of it, for a credit, a send-queue entry or a send slot
// (it never takes the arena's last free one, as a lend does). Only a
// message that fits one receive buffer of the peer goes this way; a
// larger one reports false.
//
// It sends as SendBackground does: the RPC layer sends this way the small
// control frames no reply is awaited to soon (keepalive's PING and PONG,
// window updates), from the goroutine that has them, so an idle
// connection's keepalive round starts no goroutine and waits on no
// context.
func (c *conn) TrySend(msg []byte) (bool, error) {
	select {
	case c.turn <- struct{}{}:
	default:
		return false, nil
	}
	defer c.giveTurn()
	return c.trySendTurn(msg)
}

// TryReply releases b, a message received here, and sends msg as TrySend
// would, with the credit b's receive buffer frees riding on msg instead of
// a credit-only message (transport.Replier): an idle RPC connection's
// keepalive PING is answered by one PONG, not a PONG and a credit return.
// When msg does not go, or its credits were not taken, the credit-only
// message goes as after any release.
func (c *conn) TryReply(b transport.Buffer, msg []byte) (bool, error) {
	select {
	case c.turn <- struct{}{}:
	default:
		b.Release()
		return false, nil
	}
	// Holding the turn, this goroutine is the only one to set holdCredits.
	// While it is set, a repost (this release's, or the poller's) leaves
	// the credit-only message to the check below.
	c.holdCredits.Store(true)
	b.Release()
	sent, err := c.trySendTurn(msg)
	c.holdCredits.Store(false)
	c.giveTurn()
	if c.creditsDue() {
		c.sendCreditOnly()
	}
	return sent, err
}

// trySendTurn is TrySend, for the turn's holder.
func (c *conn) trySendTurn(msg []byte) (bool, error) {
	if err := c.checkSend(context.Background(), len(msg)); err != nil {
		return false, err
	}
	if len(msg) > int(c.peer.bufSize) || c.rendezvous(len(msg)) {
		return false, nil
	}
	if c.sig.IsSet() {
		return false, c.closeErr()
	}
	if c.abortOwed {
		return false, nil
	}
	slot, ok, err := c.tryTake()
	if !ok {
		return false, err
	}
	if !c.startFill(slot) {
		return false, c.closeErr()
	}
	copy(c.slotBytes(slot), msg)
	c.endFill()
	if err := c.post(slot, kindMessage, len(msg), true, true); err != nil {
		return false, err
	}
	c.t.counters.messagesSent.Add(1)
	return true, nil
}

// tryTake takes a credit, a send-queue entry and a send slot when all are
// there and no rendezvous is in progress; it never waits.
func (s *sender) tryTake() (slot int32, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() {
		return -1, false, s.closeSig.Err()
	}
	if s.rndv.state != rndvNone || s.win.Avail() == 0 || s.avail == 0 || s.sqFree <= ctlHeadroom {
		return -1, false, nil
	}
	if slot, ok = s.mem.lend(); !ok {
		return -1, false, nil
	}
	s.lastSlot = false
	s.avail--
	s.win.Take()
	s.sqFree--
	return slot, true, nil
}

var (
	_ transport.TrySender = (*conn)(nil)
	_ transport.Replier   = (*conn)(nil)
)
