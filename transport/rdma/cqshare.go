package rdma

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// CompletionLayout says where a connection's completions go
// (Options.Completions).
type CompletionLayout int

const (
	// CompletionsPerConnection: each connection has a completion queue,
	// a completion channel (an fd) and a poller goroutine of its own.
	CompletionsPerConnection CompletionLayout = iota + 1
	// CompletionsShared: the transport's connections on a device share
	// one completion channel and one poller goroutine, and completion
	// queues of qpsPerCQ queue pairs each, demultiplexed by QP number
	// (docs/rdma.md, "Shared completion queues").
	CompletionsShared
)

// qpsPerCQ is the most queue pairs one shared completion queue serves
// (fewer when the device's largest CQ cannot hold their bound).
const qpsPerCQ = 256

// cqHub is the shared completion context of a transport on one device:
// one completion channel, the completion queues (cqGroup) that report to
// it and the poller goroutine that waits on it. The first connection
// creates it, the last one's teardown closes it (refs, under the
// transport's mu).
type cqHub struct {
	t      *Transport
	dev    *device
	ch     *verbs.CompChannel
	perCQ  int // queue pairs per group
	cqe    int // entries per group's CQ
	refs   int // connections attached, under t.mu
	groups []*cqGroup

	gmu   sync.RWMutex
	byCQ  map[*verbs.CQ]*cqGroup // gmu's: what the poller's event is for
	byQPN map[uint32]*conn       // gmu's: every attached connection, by QP number

	stopping atomic.Bool
	done     chan struct{} // closed when the poller has returned
}

// cqGroup is one shared completion queue and the lock of whoever polls it
// (pmu, as a connection's own in the per-connection layout): the holder
// handles every completion it finds, each with its connection's handler.
type cqGroup struct {
	hub *cqHub
	cq  *verbs.CQ
	qps int // queue pairs using it (or leaked to it), under t.mu

	pmu sync.Mutex
	wcs []verbs.WorkCompletion // pmu's
	pl  sync.Mutex
	// armed: the CQ is armed and its event not yet read (pl's).
	armed bool
}

// joinHub attaches a new connection's completions to the device's hub,
// creating the hub, or a group, when needed: it returns the group whose
// CQ the connection's QP must use. sqDepth + recvs is the most work
// requests the connection has outstanding at once.
func (t *Transport) joinHub(d *device, bound int) (*cqGroup, error) {
	t.mu.Lock()
	g, unused, err := t.joinHubLocked(d, bound)
	t.mu.Unlock()
	if unused != nil {
		// Outside t.mu: its poller may be handling a completion that takes it.
		unused.stop()
	}
	return g, err
}

// joinHubLocked is joinHub with t.mu held; a hub it created and could not
// use is returned for the caller to stop.
func (t *Transport) joinHubLocked(d *device, bound int) (_ *cqGroup, unused *cqHub, _ error) {
	h := d.hub
	if h == nil {
		attr, err := d.ctx.QueryDevice()
		if err != nil {
			return nil, nil, err
		}
		const slack = 8
		per := qpsPerCQ
		if attr.MaxCQE > 0 {
			per = max(1, min(per, (attr.MaxCQE-slack)/bound))
		}
		ch, err := d.ctx.NewCompChannel()
		if err != nil {
			return nil, nil, err
		}
		h = &cqHub{t: t, dev: d, ch: ch, perCQ: per, cqe: per*bound + slack,
			byCQ: make(map[*verbs.CQ]*cqGroup), byQPN: make(map[uint32]*conn), done: make(chan struct{})}
		d.hub = h
		go h.poll()
	}
	var g *cqGroup
	for _, x := range h.groups {
		if x.qps < h.perCQ {
			g = x
			break
		}
	}
	if g == nil {
		cq, err := d.ctx.CreateCQ(h.cqe, h.ch)
		if err != nil {
			err = fmt.Errorf("creating a shared completion queue of %d entries: %w", h.cqe, err)
			if h.refs == 0 {
				d.hub = nil
				return nil, h, err
			}
			return nil, nil, err
		}
		g = &cqGroup{hub: h, cq: cq, wcs: make([]verbs.WorkCompletion, 32)}
		h.groups = append(h.groups, g)
		h.gmu.Lock()
		h.byCQ[cq] = g
		h.gmu.Unlock()
		// Armed at once: nobody polls it yet.
		g.pmu.Lock()
		g.letGo(nil)
	}
	g.qps++
	h.refs++
	return g, nil, nil
}

// add makes the group's handler route qpn's completions to c. A QP
// destroyed just now may have had the number: its teardown holds its
// group's lock from the destroy until its number left the table, so add
// waits for that lock and looks again.
func (g *cqGroup) add(qpn uint32, c *conn) {
	h := g.hub
	for {
		h.gmu.Lock()
		old := h.byQPN[qpn]
		if old == nil || old == c {
			h.byQPN[qpn] = c
			h.gmu.Unlock()
			return
		}
		h.gmu.Unlock()
		if old.g.routes(qpn, old) {
			runtime.Gosched() // not in its destroy window: cannot be (see above)
		}
	}
}

// routes waits for the group's lock (a teardown holds it from its QP's
// destroy until its number left the table) and reports whether qpn still
// routes to c.
func (g *cqGroup) routes(qpn uint32, c *conn) bool {
	g.pmu.Lock()
	defer g.pmu.Unlock()
	g.hub.gmu.RLock()
	defer g.hub.gmu.RUnlock()
	return g.hub.byQPN[qpn] == c
}

// remove stops routing qpn's completions to c: from now on they are
// strays, counted and dropped.
func (g *cqGroup) remove(qpn uint32, c *conn) {
	g.hub.gmu.Lock()
	if g.hub.byQPN[qpn] == c {
		delete(g.hub.byQPN, qpn)
	}
	g.hub.gmu.Unlock()
}

// leaveHub drops a connection's use of group g, once its QP is destroyed:
// its place in the CQ's bound goes back unless drained is false (some of
// its work requests may still have completions coming: the place stays
// taken for good, so the bound still holds). The last connection closes
// the hub.
func (t *Transport) leaveHub(g *cqGroup, drained bool) {
	if drained {
		// Completions of the QP polled before its destroy returned are
		// handled; take what may have come since, then free its place.
		g.pmu.Lock()
		for g.pollOnce() > 0 {
		}
		g.letGo(nil)
	} else {
		t.counters.cqPlacesLeaked.Add(1)
	}
	t.mu.Lock()
	h := g.hub
	if drained {
		g.qps--
	}
	h.refs--
	last := h.refs == 0
	if last && h.dev.hub == h {
		h.dev.hub = nil
	}
	t.mu.Unlock()
	if last {
		h.stop()
	}
}

// stop ends the poller and frees the hub's queues and channel: no
// connection uses them any more, and no new one can find the hub. Called
// without t.mu (a completion the poller handles may take it; joinHub defers
// it past its unlock).
func (h *cqHub) stop() {
	h.stopping.Store(true)
	h.ch.Wake()
	<-h.done
	for _, g := range h.groups {
		g.pmu.Lock() // nobody polls: the poller is gone, no waiter is left
		if err := g.cq.Close(); err != nil {
			h.t.o.Logger.Error("freeing a shared completion queue", zap.Error(err))
		}
		g.pmu.Unlock()
	}
	if err := h.ch.Close(); err != nil {
		h.t.o.Logger.Error("freeing a completion channel", zap.Error(err))
	}
}

// poll is the hub's poller goroutine: it sleeps on the completion channel
// and handles the completions of a group that nobody else polls for.
func (h *cqHub) poll() {
	defer close(h.done)
	for {
		cq, err := h.ch.Wait(context.Background())
		if h.stopping.Load() {
			return
		}
		if err != nil {
			if errors.Is(err, verbs.ErrWoken) {
				continue
			}
			h.t.o.Logger.Error("waiting for completions: the shared completion queues are no longer watched", zap.Error(err))
			return
		}
		h.gmu.RLock()
		g := h.byCQ[cq]
		h.gmu.RUnlock()
		if g == nil {
			continue
		}
		h.t.counters.cqEvents.Add(1)
		g.pl.Lock()
		g.armed = false // the event is read
		mine := g.pmu.TryLock()
		g.pl.Unlock()
		if !mine {
			continue // its holder re-arms when it lets go
		}
		g.stream()
		g.letGo(nil)
	}
}

// drive is conn.drive over a shared completion queue: c's waiter polls the
// group if nobody else does, handling every connection's completions, and
// spins by c's rule until w fires.
func (g *cqGroup) drive(c *conn, w chan struct{}, spin bool) bool {
	if c.closing.Load() || !g.pmu.TryLock() {
		return false
	}
	handled := false
	for range driveRounds {
		if c.closing.Load() {
			break
		}
		if g.pollOnce() > 0 {
			handled = true
			if fired(w) {
				break
			}
		}
		d := c.spinNow(spin)
		if d <= 0 || !g.spinFor(c, d) {
			break
		}
		handled = true
		if fired(w) {
			break
		}
	}
	g.letGo(c)
	return handled
}

// watch is what a waiter of c does when another goroutine holds the shared
// CQ (drive found it taken) while a reply is expected on c: for c's spin
// budget it watches w and keeps trying the CQ, yielding the processor,
// instead of sleeping at once — the holder (another connection's waiter,
// perhaps the peer's in this process) is likely to deliver c's reply
// soon, and a sleep costs a wake-up. It reports whether w fired or it
// handled completions. Reads the clock every spinCheckEvery tries only.
func (g *cqGroup) watch(c *conn, w chan struct{}, spin bool) bool {
	if !spin || c.o.PollSpin <= 0 || !c.expect.Load() || c.bigSend.Load() {
		return false
	}
	d := c.spinBudget()
	start := time.Now()
	for i := 1; !c.closing.Load(); i++ {
		runtime.Gosched()
		select {
		case <-w:
			return true
		default:
		}
		if g.drive(c, w, false) {
			return true
		}
		if i%spinCheckEvery == 0 && time.Since(start) >= d {
			return false
		}
	}
	return false
}

// spinFor polls for up to d while c is open, reading the clock every
// spinCheckEvery polls only. Called with pmu held.
func (g *cqGroup) spinFor(c *conn, d time.Duration) bool {
	start := time.Now()
	for i := 1; c == nil || !c.closing.Load(); i++ {
		runtime.Gosched()
		if g.pollOnce() > 0 {
			return true
		}
		if i%spinCheckEvery == 0 && time.Since(start) >= d {
			return false
		}
	}
	return false
}

// stream handles completions while they keep coming, as conn.stream.
// Called with pmu held.
func (g *cqGroup) stream() {
	if g.pollOnce() == 0 {
		return
	}
	for {
		for g.pollOnce() > 0 {
		}
		if g.hub.t.o.PollSpin <= 0 || !g.spinFor(nil, streamSpin) {
			return
		}
	}
}

// letGo releases pmu, arming the CQ first unless it still is, as
// conn.letGo; c, the connection whose waiter held it, if any, posts its
// released receives.
func (g *cqGroup) letGo(c *conn) {
	if c != nil {
		c.flushUnposted()
	}
	g.pl.Lock()
	if !g.armed && !g.hub.stopping.Load() {
		g.armed = true
		g.hub.t.counters.cqArms.Add(1)
		if err := g.cq.ReqNotify(false); err != nil {
			g.hub.t.o.Logger.Error("arming a shared completion queue", zap.Error(err))
		} else {
			for g.pollOnce() == len(g.wcs) {
			}
		}
	}
	g.pmu.Unlock()
	g.pl.Unlock()
}

// pollOnce polls the CQ once and hands each completion to its connection.
// Called with pmu held.
func (g *cqGroup) pollOnce() int {
	n, err := g.cq.Poll(g.wcs)
	if err != nil {
		if !g.hub.stopping.Load() {
			g.hub.t.o.Logger.Error("polling a shared completion queue", zap.Error(err))
		}
		return 0
	}
	if n > 0 {
		g.dispatch(g.wcs[:n])
	}
	return n
}

// dispatch hands completions to their connections, a run of one QP's at a
// time (in order: a QP's completions keep theirs). A completion whose QP
// is no longer attached is a stray: counted, dropped.
func (g *cqGroup) dispatch(wcs []verbs.WorkCompletion) {
	h := g.hub
	for i := 0; i < len(wcs); {
		qpn := wcs[i].QPNum
		j := i + 1
		for j < len(wcs) && wcs[j].QPNum == qpn {
			j++
		}
		run := wcs[i:j]
		i = j
		h.gmu.RLock()
		c := h.byQPN[qpn]
		h.gmu.RUnlock()
		switch {
		case c == nil:
			h.t.counters.strayCompletions.Add(uint64(len(run)))
		case c.destroying.Load():
			// A handshake that failed: only shared receive buffers
			// matter, they go back to the pool.
			for k := range run {
				if isRecv(&run[k]) {
					c.takenLost(&run[k])
				}
			}
		case c.closing.Load():
			c.handleClosing(run)
			c.pokeTeardown()
		default:
			c.reposts = c.handle(run, c.reposts[:0])
			c.flushUnposted()
			if c.closing.Load() {
				c.pokeTeardown()
			}
		}
	}
}

// pokeTeardown tells a shared connection's teardown that some of its
// completions were handled.
func (c *conn) pokeTeardown() {
	select {
	case c.tdWake <- struct{}{}:
	default:
	}
}

// startTeardown runs the teardown of a shared-completions connection once
// it both started and began closing (whichever comes last starts it).
func (c *conn) startTeardown() {
	if c.started.Load() && c.sig.IsSet() && c.tdStarted.CompareAndSwap(false, true) {
		go c.teardownShared()
	}
}

// drainShared makes sure c's completions are handled until deadline (or
// stop): it polls the group if it can, else waits until whoever polls
// handles one of c's. It reports whether it saw progress.
func (c *conn) drainShared(deadline time.Time, stop <-chan struct{}) bool {
	g := c.g
	if g.pmu.TryLock() {
		n := g.pollOnce()
		g.letGo(nil)
		if n > 0 {
			return true
		}
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-c.tdWake:
		return true
	case <-stop:
		return false
	case <-tm.C:
		return false
	}
}

// teardownShared is teardown for a connection on a shared completion
// queue: it runs on a goroutine of its own (there is no poller of the
// connection's), its completions keep coming through the group's handler
// (handleClosing, once closing), and the QP is destroyed, and its buffers
// freed, only once every work request it counts has completed.
func (c *conn) teardownShared() {
	defer close(c.closed)
	g := c.g
	deadline := time.Now().Add(c.o.CloseGrace)
	local := false
	select {
	case <-c.local:
		local = true
	default:
	}
	// Sends already posted, while the peer lives: a peer that closed
	// first (its end gone before our watcher saw it) acknowledges nothing
	// more, and rxe took longer than a 30 s grace to fail such sends.
	for local && c.pendingSends() && time.Now().Before(deadline) && !c.gone() {
		c.drainShared(deadline, c.peerGone)
	}
	expired := local && c.pendingSends() && !c.gone()
	// Under the group's lock: no completion of c's is being handled while
	// its reassembly is reset and its receive side ends.
	if c.beforeERR != nil {
		// Not under the CQ's lock: the test's peer may share the CQ.
		c.beforeERR()
	}
	var lastWQE <-chan struct{}
	if c.pool != nil {
		lastWQE = c.pool.expectLastWQE(c.qp.Num())
	}
	g.pmu.Lock()
	for g.pollOnce() > 0 {
	}
	c.stopRecvs()
	if err := c.qp.ToError(); err != nil {
		c.log.Debug("moving the queue pair to ERR", zap.Error(err))
	}
	c.boot.Close()
	c.rmu.Lock()
	c.rdone = true
	c.asm.reset()
	c.wakeReadersLocked()
	if local {
		c.lentBufs.Add(-int32(c.dropQueueLocked()))
	}
	c.rmu.Unlock()
	g.letGo(nil)
	for (c.recvOutstanding.Load() > 0 || c.pendingSends()) && time.Now().Before(deadline) {
		if !c.drainShared(deadline, nil) {
			break
		}
	}
	drained := c.recvOutstanding.Load() <= 0 && !c.pendingSends()
	if expired || !drained {
		c.t.counters.closeGraceExpired.Add(1)
	}
	if c.pool != nil {
		// Shared receives are not counted per connection (a receive
		// completion takes one from recvOutstanding either way: with a
		// pool it only goes below zero): one the QP took from the SRQ
		// mid-message is flushed when the device's responder sees ERR, and
		// the device says when that is done (LAST_WQE_REACHED).
		bound := c.pool.settleBound(deadline)
		for ev := lastWQE; time.Now().Before(bound); {
			if !c.drainShared(bound, ev) {
				break
			}
		}
		drained = c.pool.lastWQEDone(c.qp.Num(), lastWQE) && drained
	}
	c.leavePool()
	c.torndown.Store(true)
	c.mu.Lock()
	c.broadcastLocked()
	c.lendWake.broadcast()
	c.mu.Unlock()
	<-c.watchDone
	// The QP is destroyed under the CQ's lock, its last completions are
	// handled, and only then does its number leave the table: until the
	// QP is gone no other can have its number, and a new QP that gets it
	// waits in add for this lock (a completion of this QP's still in the
	// CQ would be routed to it).
	g.pmu.Lock()
	for g.pollOnce() > 0 {
	}
	if err := c.qp.Close(); err != nil {
		c.log.Error("freeing verbs resources", zap.Error(err))
	}
	for g.pollOnce() > 0 {
	}
	g.remove(c.qp.Num(), c)
	g.letGo(nil)
	c.foldTaken()
	c.t.leaveHub(g, drained)
	if c.lentBufs.Load() == 0 {
		c.freeMemory()
	}
	c.t.counters.connsClosed.Add(1)
}

// destroyShared takes a connection that never started off its shared
// completion queue: what its QP flushes is handled (shared receive
// buffers go back to the pool) before it stops being routed to it.
func (c *conn) destroyShared() {
	c.destroying.Store(true)
	if c.qp == nil {
		return
	}
	_ = c.qp.ToError()
	c.g.pmu.Lock()
	for c.g.pollOnce() > 0 {
	}
	c.g.letGo(nil)
	c.g.remove(c.qp.Num(), c)
}
