package rdma

import "github.com/rdmarpc/rdmarpc/transport"

// TryReply releases b, a message received here, and sends msg as TrySend
// would, with the credit b's receive buffer frees riding on msg instead of
// a credit-only message (transport.Replier): an idle RPC connection's
// keepalive PING is answered by one PONG, not a PONG and a credit return.
// When msg does not go, or its credits were not taken, the credit-only
// message goes as after any release.
func (c *conn) TryReply(b transport.Buffer, msg []byte) (bool, error) {
	if took, err := c.tryTurn(msg); !took {
		b.Release()
		return false, err
	}
	// Holding the turn, this goroutine is the only one to set holdCredits.
	// While it is set, a repost (this release's, or the poller's) leaves
	// the credit-only message to the check below.
	c.holdCredits.Store(true)
	b.Release()
	sent, err := c.trySendTurn(msg, false)
	c.holdCredits.Store(false)
	c.giveTurn()
	if c.creditsDue() {
		c.sendCreditOnly()
	}
	return sent, err
}

var (
	_ transport.TrySender = (*conn)(nil)
	_ transport.Replier   = (*conn)(nil)
)
