package rdma

// Asks and answers (docs/rdma.md, "Asks and answers"). Between two sides
// that both set featAnswer in their hellos, a side that receives into a
// shared pool may send a whole message as an ask (kindAsk): it has set one
// of the pool's spare buffers aside for the answer. The peer's next whole
// message sent by TrySend or TryReply is then the answer (kindAnswer): it
// takes no credit, so the asker owes none back for it, and the buffer set
// aside goes back to the pool once the answer's buffer is posted again.
// An idle RPC connection's keepalive round is so a PING and a PONG and
// nothing else: without it, the PONG takes the asker's one credit, and
// the asker returns it in a credit-only message of its own.
//
// A side asks only while no answer of its is outstanding, so a peer holds
// at most one free answer: an ask while one is owed, or an answer nobody
// asked for, is a protocol error.
const (
	kindAsk    kind = 10 // a whole message; the sender set a receive aside for the answer
	kindAnswer kind = 11 // a whole message into the receive an ask set aside; takes no credit

	// featAnswer: this side understands asks and answers.
	featAnswer = 1 << 3
)

// answerTag marks the id of a Buffer lent in place for an answer: its
// receive buffer was set aside by an ask, not counted as a credit.
const answerTag = 1 << 32

// TryAsk sends msg as TrySend does, as an ask when this side receives into
// a shared pool with a buffer to spare and has no ask outstanding: the
// peer's answer (TryReply) then takes no credit (transport.Replier).
func (c *conn) TryAsk(msg []byte) (bool, error) {
	if took, err := c.tryTurn(msg); !took {
		return false, err
	}
	defer c.giveTurn()
	return c.trySendTurn(msg, true)
}

// setAside sets a spare buffer of the shared pool aside for an answer,
// unless the peer takes no asks, an ask is outstanding, or the pool has
// none to spare; it reports whether it did.
func (r *receiver) setAside() bool {
	if !r.answers || r.pool == nil {
		return false
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.asked || r.detached || r.rdone || r.pool.lendSpare(1) == 0 {
		return false
	}
	r.asked = true
	return true
}

// answerArrived accounts for an answer: the buffer set aside by the ask
// took it, not a credit. Called with rmu held.
func (r *receiver) answerArrived() error {
	if !r.asked {
		return protoErr("an answer to no ask")
	}
	r.asked = false
	return nil
}

// askArrived records that the peer set a receive aside for an answer: the
// next whole message TrySend or TryReply sends goes free. Called with rmu
// held (the sender's lock comes first in the order: answerFree is atomic).
func (c *conn) askArrived() error {
	if !c.answerFree.CompareAndSwap(false, true) {
		return protoErr("an ask while an answer is owed")
	}
	return nil
}

// releasedAnswer posts an answer's receive buffer again at once and gives
// the buffer its ask set aside back to the pool: no credit is owed for it.
func (c *conn) releasedAnswer(buf int32) {
	if err := c.postControl(buf); err != nil {
		if !c.sig.IsSet() {
			c.fail(err)
		}
		return
	}
	c.pool.release(1)
}
