package rdma

import (
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// conn is one RDMA connection: an RC queue pair with its own completion
// queue, registered receive buffers and send slots, and the TCP connection
// of its bootstrap kept open as the liveness signal.
//
// Its state is split along the seams, each part with its own lock and
// file: the send side (sender, send.go, mu), the receive side (receiver,
// recv.go, rmu), completion handling (completions, completions.go, with
// the pmu and pl of its completion queue, cq.go) and the life cycle (life,
// teardown.go). Lock order: pmu, pl, mu, rmu.
//
// Where its completions come from is its completion layout (cqs): a
// queue, channel and poller of its own (ownCQ), or a queue shared with
// other connections (sharedCQ). The layout's poller handles the
// completions nobody else polls for, and the teardown runs when the
// connection closes; the watcher waits for the bootstrap connection to
// end. Close waits for both.
type conn struct {
	t    *Transport
	o    *Options
	log  *zap.Logger
	dev  *device
	boot net.Conn
	peer hello

	qp      *verbs.QP
	sendMR  *verbs.MR // with PrivateSendSlots: SendSlots slots of the peer's buffer size
	recvs   int       // receive buffers in all
	charged int64     // bytes of registered memory taken from the budget

	sender
	receiver
	completions
	life
}

// ctlHeadroom is how many send-queue entries are kept for credit-only
// messages beyond the send slots (at most credit.Extra are ever in flight).
const ctlHeadroom = credit.Extra + 2

// newConn creates the queue pair and its resources and posts every receive;
// the QP is left in INIT. The send side is set up by connect, once the
// peer's hello is known.
//
// With shared, its receives come from the device's shared receive queue
// instead: it joins the pool with a window of SharedCredits, and its CQ
// holds the completions of at most RecvBuffers (the most its window grows
// to) plus the control receives.
func (t *Transport) newConn(dev *device, port uint8, boot net.Conn, shared bool) (*conn, error) {
	o := &t.o
	c := &conn{
		t:     t,
		o:     o,
		log:   o.Logger.With(zap.Stringer("peer", boot.RemoteAddr())),
		dev:   dev,
		boot:  boot,
		recvs: o.RecvBuffers + credit.Extra,
	}
	c.turn = make(chan struct{}, 1)
	c.slots, c.signalEvery, c.sender.ctr, c.closeSig = o.SendSlots, o.SignalEvery, &t.counters, &c.sig
	c.sender.joinSweep = func() { t.giveBacks.add(c) }
	c.led = credit.NewLedger(o.RecvBuffers)
	c.releaseBatch = max(1, o.RecvBuffers/4)
	c.queueBytes, c.maxWindow = o.RecvQueueBytes, o.RecvBuffers
	c.self = c
	c.owner, c.lentCount, c.onMessage, c.receiver.ctr, c.receiver.log = recvBuffer{c}, &c.life.lentBufs, c.noteReceived, &t.counters, c.log
	if shared {
		pool, err := t.sharedPool(dev)
		if err != nil {
			return nil, err
		}
		if err := pool.join(o.SharedCredits); err != nil {
			return nil, err
		}
		c.pool = pool
		// A fresh connection starts with a full window when the pool has
		// spare buffers (a burst needs no round trip first), lent from the
		// start: once idle the peer gives it back down to SharedCredits.
		boost := pool.lendSpare(o.RecvBuffers - o.SharedCredits)
		c.led = credit.NewLentLedger(o.SharedCredits+boost, o.SharedCredits)
	}
	c.asm = reassembler{max: o.MaxMessageSize}
	c.epoch = time.Now()
	c.local = make(chan struct{})
	c.closed = make(chan struct{})
	c.watchDone = make(chan struct{})
	c.peerGone = make(chan struct{})
	c.tdWake = make(chan struct{}, 1)
	if h := t.connHook; h != nil {
		h(c)
	}
	sqDepth := o.SendSlots + ctlHeadroom
	rndv := o.RendezvousThreshold > 0
	rsv := 0
	if rndv {
		rsv = rndvReserve
	}
	// At most sqDepth sends and c.recvs receives (its own, or as many as
	// the peer's credits: the most its window grows to) of this QP
	// complete at once.
	var err error
	if c.cqs, err = t.newCompletionLayout(c, sqDepth+rsv+c.recvs); err != nil {
		c.destroy() // leaves the pool it joined
		return nil, err
	}
	cq := c.cqs.queue().cq
	qc := verbs.QPConfig{
		SendCQ: cq, RecvCQ: cq,
		MaxSendWR: sqDepth + rsv, MaxRecvWR: c.recvs,
		MaxInlineData: 128,
		// Remote reads of the rendezvous regions only: every other
		// region is registered local-only.
		RemoteRead: rndv,
	}
	if c.pool != nil {
		qc.SRQ = c.pool.srq
	}
	c.qp, err = dev.pd.CreateQP(qc)
	if err != nil {
		c.destroy()
		return nil, err
	}
	c.maxInline = c.qp.MaxInline()
	c.sqFree = sqDepth
	c.sender.rndv.rsvFree = rsv
	c.cqs.attach(c)
	if c.rq, err = c.newRecvQueue(); err != nil {
		c.destroy()
		return nil, err
	}
	if err = c.qp.ToInit(port); err != nil {
		c.destroy()
		return nil, err
	}
	if err = c.rq.fill(c.recvs); err != nil {
		c.destroy()
		return nil, err
	}
	return c, nil
}

// charge takes n bytes of registered memory from the transport's budget,
// before they are registered; freeing the connection's memory gives back
// all it took.
func (c *conn) charge(n int) error {
	if err := c.t.budget.take(int64(n)); err != nil {
		return err
	}
	c.charged += int64(n)
	return nil
}

// uncharge gives back what charge took.
func (c *conn) uncharge() {
	c.t.budget.give(c.charged)
	c.charged = 0
}

// connect sets up the send side for the peer and moves the QP to RTS.
func (c *conn) connect(peer hello, local hello, rtr verbs.RTRAttr) error {
	c.peer = peer
	c.avail = c.o.SendSlots
	var err error
	if c.o.PrivateSendSlots {
		if err := c.charge(c.o.SendSlots * int(peer.bufSize)); err != nil {
			return err
		}
		if c.sendMR, err = c.dev.pd.Register(c.o.SendSlots * int(peer.bufSize)); err != nil {
			return fmt.Errorf("registering %d send slots of %d bytes: %w", c.o.SendSlots, peer.bufSize, err)
		}
		c.mem = newArena(int(peer.bufSize), c.o.SendSlots, c.sendMR, c.sendMR.Bytes(), nil)
	} else if c.mem, err = c.t.sharedArena(c.dev, int(peer.bufSize), c.o.SendSlots); err != nil {
		return err
	}
	c.win = credit.NewWindow(int(peer.recvs))
	c.lends = peer.features&featLend != 0
	c.answers = local.features&featAnswer != 0 && peer.features&featAnswer != 0
	c.rndvOn = local.features&featRndv != 0 && peer.features&featRndv != 0
	if err = c.qp.ToRTR(rtr); err != nil {
		return err
	}
	return c.qp.ToRTS(verbs.RTSAttr{SQPSN: local.psn, Timeout: c.o.AckTimeout, RetryCount: c.o.RetryCount})
}

// start runs the poller and the watcher.
func (c *conn) start() {
	c.t.counters.connsOpened.Add(1)
	if c.win.Max() > c.peer.keep() && c.swept.CompareAndSwap(false, true) {
		// Lent from the start: given back once idle, like any lend.
		c.t.giveBacks.add(c)
	}
	go c.watch()
	c.cqs.start(c)
}

// newCompletionLayout makes the completion layout of Options.Completions
// for c, whose QP has at most bound work requests outstanding at once.
func (t *Transport) newCompletionLayout(c *conn, bound int) (completionLayout, error) {
	if t.o.Completions == CompletionsShared {
		return t.joinShared(c, bound)
	}
	return newOwnCQ(c, bound+8)
}

// destroy frees whatever newConn created, when the connection never started.
func (c *conn) destroy() {
	c.torndown.Store(true)
	c.destroying.Store(true)
	if c.rq != nil {
		c.rq.stop()
	}
	if c.cqs != nil {
		// Frees the QP; a message may have landed before the handshake
		// failed: a shared receive buffer goes back to its pool first.
		c.cqs.abandon(c)
	}
	for _, mr := range []*verbs.MR{c.recvMR, c.sendMR} {
		if mr != nil {
			c.closeVerbs(mr)
		}
	}
	c.freeSendMemory()
	c.uncharge()
	if c.pool != nil {
		c.pool.leave(c.led.Recvs()+credit.Extra, true) // nothing arrived: none is held
		c.pool = nil
	}
}

func (c *conn) Done() <-chan struct{} { return c.sig.Done() }

// BytesReceived counts fragments as they complete, so a large message on
// its way is a sign of life before it is whole, and the immediate data of
// every message, so a peer that only returns credits (credit-only
// messages, no payload) is one too (transport.Activity).
func (c *conn) BytesReceived() uint64 { return c.bytesIn.Load() }

func (c *conn) MaxMessageSize() int { return int(c.peer.maxMessage) }

// Counters returns the transport's counters, over all its connections: the
// RPC layer's stats handlers reach them from the connection.
func (c *conn) Counters() map[string]uint64 { return c.t.Counters() }

// Gauges returns the transport's levels (registered memory), likewise.
func (c *conn) Gauges() map[string]uint64 { return c.t.Gauges() }

// Scheme names the connection's transport for the RPC layer's stats
// handlers: its addresses are the TCP bootstrap's.
func (c *conn) Scheme() string { return "rdma" }

func (c *conn) LocalAddr() net.Addr { return c.boot.LocalAddr() }

func (c *conn) RemoteAddr() net.Addr { return c.boot.RemoteAddr() }
