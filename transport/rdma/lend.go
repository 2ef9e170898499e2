package rdma

import (
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// Lent credits on the wire (docs/rdma.md, "Shared receive queue"). Between
// two sides that both set featLend in their hellos, bits 27..16 of the
// immediate data carry the credits the sender lends the receiver (kinds
// 0–5), or, in a give-back (kind 6), the lent credits the sender gives
// back. Without featLend those bits stay zero.
const (
	kindGiveBack kind = 6 // lent credits returned by an idle sender; takes a credit, no payload

	// featLend: this side understands lends and give-backs.
	featLend = 1 << 0
)

// giveBackIdle is how long a connection holding lent credits sends nothing
// before it gives them back; the sweep looks twice as often.
const giveBackIdle = 500 * time.Millisecond

func encodeImmLend(k kind, credits, lend int) uint32 {
	return encodeImm(k, credits) | uint32(lend)<<16
}

// decodeImmLend decodes immediate data: with lends (featLend negotiated),
// bits 27..16 are the lend field and kindGiveBack is a kind; without, they
// are reserved.
func decodeImmLend(imm uint32, lends bool) (k kind, credits, field int, err error) {
	if !lends || kind(imm>>28) != kindGiveBack && imm&0x0FFF0000 == 0 {
		k, credits, err = decodeImm(imm)
		return k, credits, 0, err
	}
	k = kind(imm >> 28)
	if k > kindAnswer {
		return 0, 0, 0, protoErr("unknown message kind %d in immediate data %#x", k, imm)
	}
	return k, int(imm & 0xFFFF), int(imm >> 16 & 0xFFF), nil
}

// outImm is the immediate data of an outgoing data message of kind k: the
// credits owed and, to a peer that takes them, the credits lent and not yet
// told.
func (r *receiver) outImm(k kind) uint32 {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return encodeImmLend(k, r.led.Piggyback(), r.led.TakeLend())
}

// giveBackImm is the immediate data of a give-back of n lent credits,
// with the credits owed.
func (r *receiver) giveBackImm(n int) uint32 {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return encodeImmLend(kindGiveBack, r.led.Piggyback(), n)
}

// creditOnly takes the credits owed for a credit-only message, when
// enough are, with the credits lent and not yet told.
func (r *receiver) creditOnly() (n, lend int) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if n = r.led.CreditOnly(); n > 0 {
		lend = r.led.TakeLend()
	}
	return n, lend
}

// lendLocked lends the peer more credits when it has used all it holds:
// up to as many again, at most RecvBuffers in all, from the pool's spare
// buffers. The lend rides on the next message that returns credits.
// Called with rmu held.
//
// At the guaranteed window it lends only to a busy peer: one that used the
// window up before, within giveBackIdle. A peer that sends a message now
// and then (an idle RPC connection's keepalive PING and PONG, one each per
// 30 s) uses a window of 1 up with each, and a lend then cost two messages
// more each way for nothing: the lend's credit-only return, and 500 ms
// later the give-back and its return. A burst after an idle spell is lent
// to from its second use of the window on. Lending less is always safe:
// the peer goes on with what it holds.
func (r *receiver) lendLocked() {
	if r.pool == nil || !r.lends || !r.led.Exhausted() || r.led.LendOwed() > 0 {
		return
	}
	if r.led.Lent() == 0 {
		now := time.Since(r.epoch)
		prev := r.exhaustedAt
		r.exhaustedAt = now
		if prev == 0 || now-prev >= giveBackIdle {
			return
		}
	}
	want := min(r.led.Recvs(), r.maxWindow-r.led.Recvs(), credit.MaxLend)
	if want <= 0 {
		return
	}
	if k := r.pool.lend(want); k > 0 {
		r.led.Lend(k)
		r.ctr.creditsLent.Add(uint64(k))
	}
}

// lentLocked records credits the peer lent us; the connection joins the
// idle sweep that gives them back (sweep: lock order mu, then the
// sweep's). Called with mu held.
func (s *sender) lentLocked(n int) error {
	if err := s.win.Lend(n); err != nil {
		return err
	}
	if s.swept.CompareAndSwap(false, true) {
		s.joinSweep()
	}
	return nil
}

// giveBackLent returns lent credits the connection has not used for
// giveBackIdle, in a give-back message; it reports whether the connection
// holds no lent credit any more (the sweep forgets it). It never waits: a
// connection whose turn is taken is not idle.
func (c *conn) giveBackLent(now time.Duration) (done bool) {
	if c.sig.IsSet() {
		return true
	}
	if now-time.Duration(c.sentAt.Load()) < giveBackIdle {
		return false
	}
	select {
	case c.turn <- struct{}{}:
	default:
		return false
	}
	defer c.giveTurn()
	n, done := c.queueGiveBack(&c.receiver, c.peer.keep())
	if n > 0 && c.flush() == nil {
		c.t.counters.creditsGivenBack.Add(uint64(n))
	}
	return done
}

// queueGiveBack queues a give-back of the lent credits beyond keep, with
// the credits r owes, unless the send queue has no room or an abort is
// owed; it returns how many it gives back, and done when no lent credit is
// left (the connection leaves the sweep).
func (s *sender) queueGiveBack(r *receiver, keep int) (n int, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abortOwed || s.sqFree <= ctlHeadroom {
		return 0, false
	}
	if n = s.win.GiveBack(keep); n > 0 {
		s.win.Take()
		s.sqFree--
		s.enqueueLocked(verbs.SendWR{ID: s.seq, Signaled: true, Imm: r.giveBackImm(n), HasImm: true}, -1)
		s.handOffLendLocked()
	}
	if done = s.win.Max() <= keep; done {
		s.swept.Store(false)
	}
	return n, done
}

// lenders are the connections that hold lent credits, swept by one
// goroutine per transport while there are any: it gives each one's credits
// back once it is idle. The goroutine exits when the set empties.
type lenders struct {
	mu      sync.Mutex
	set     map[*conn]struct{}
	running bool
	kick    chan struct{} // the set emptied: exit now
	done    chan struct{} // closed when the running sweep exits
}

func (l *lenders) add(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.set == nil {
		l.set = make(map[*conn]struct{})
	}
	l.set[c] = struct{}{}
	if !l.running {
		l.running = true
		l.kick = make(chan struct{}, 1)
		l.done = make(chan struct{})
		go l.sweep(l.kick, l.done)
	}
}

// remove forgets c (closed); the sweep ends at once when none is left.
// It returns once the sweep has exited, if it was the last.
func (l *lenders) remove(c *conn) {
	l.mu.Lock()
	if _, ok := l.set[c]; !ok {
		l.mu.Unlock()
		return
	}
	delete(l.set, c)
	var wait chan struct{}
	if len(l.set) == 0 && l.running {
		select {
		case l.kick <- struct{}{}:
		default:
		}
		wait = l.done
	}
	l.mu.Unlock()
	if wait != nil {
		<-wait
	}
}

func (l *lenders) sweep(kick, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(giveBackIdle / 2)
	defer tick.Stop()
	var conns []*conn
	for {
		select {
		case <-tick.C:
		case <-kick:
		}
		l.mu.Lock()
		if len(l.set) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		conns = conns[:0]
		for c := range l.set {
			conns = append(conns, c)
		}
		l.mu.Unlock()
		for _, c := range conns {
			if c.giveBackLent(time.Since(c.epoch)) {
				l.mu.Lock()
				if !c.swept.Load() { // not lent to again meanwhile
					delete(l.set, c)
				}
				l.mu.Unlock()
			}
		}
	}
}

// leavePool gives the connection's share of the shared pool back once
// nothing more can arrive (the teardown's last drain is done): its window
// and control receives, but for the buffers still held (by users, or
// waiting to be posted), whose commitment goes back as each is posted
// again. It also leaves the give-back sweep.
func (c *conn) leavePool() {
	c.t.giveBacks.remove(c)
	if c.pool == nil {
		return
	}
	bufs, n := c.detach()
	c.pool.leave(n, true)
	c.repost(bufs)
}

// detach marks the receive side as gone from the pool: it returns the
// buffers waiting to be posted again and how many of its commitment go
// back to the pool now.
func (r *receiver) detach() (bufs []int32, n int) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	bufs = append(r.takeUnpostedLocked(), r.deferred...)
	r.deferred = nil
	bufs = append(bufs, r.orphans...)
	r.orphans = nil
	held := r.led.Unreturned() - r.led.Owed()
	r.detached = true
	n = r.led.Recvs() + credit.Extra - held
	if r.asked {
		// The answer never came: the buffer set aside goes back too.
		r.asked = false
		n++
	}
	return bufs, n
}

// repostOrphans posts again the shared buffers dropped from the queue
// after the teardown (a Close after the peer's failure).
func (c *conn) repostOrphans() {
	c.repost(c.takeOrphans())
}

func (r *receiver) takeOrphans() []int32 {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	bufs := r.orphans
	r.orphans = nil
	return bufs
}
