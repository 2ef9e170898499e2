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
	byQPN map[uint32]*sharedCQ   // gmu's: every attached connection, by QP number

	stopping atomic.Bool
	done     chan struct{} // closed when the poller has returned
}

// cqGroup is one shared completion queue: whoever holds its core's pmu
// handles every completion it finds, each with its connection's handler
// (dispatch).
type cqGroup struct {
	hub *cqHub
	q   *cqCore
	qps int // queue pairs using it (or leaked to it), under t.mu
}

// sharedCQ is the shared completion layout (CompletionsShared) of one
// connection: its QP reports to a group's queue, whose completions any of
// the group's waiters, or the hub's poller, hands to it. Its teardown runs
// on a goroutine of its own, started by whichever of start and the close
// comes last.
type sharedCQ struct {
	g         *cqGroup
	c         *conn
	started   atomic.Bool
	tdStarted atomic.Bool
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
			byCQ: make(map[*verbs.CQ]*cqGroup), byQPN: make(map[uint32]*sharedCQ), done: make(chan struct{})}
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
		g = &cqGroup{hub: h}
		g.q = newCQCore(cq, t, g.dispatch, h.stopping.Load, func(err error) {
			if !h.stopping.Load() {
				t.o.Logger.Error("a shared completion queue", zap.Error(err))
			}
		})
		h.groups = append(h.groups, g)
		h.gmu.Lock()
		h.byCQ[cq] = g
		h.gmu.Unlock()
		// Armed at once: nobody polls it yet.
		g.q.pmu.Lock()
		g.q.letGo(nil)
	}
	g.qps++
	h.refs++
	return g, nil, nil
}

// add makes the group's handler route qpn's completions to s. A QP
// destroyed just now may have had the number: its teardown holds its
// group's lock from the destroy until its number left the table, so add
// waits for that lock and looks again.
func (g *cqGroup) add(qpn uint32, s *sharedCQ) {
	h := g.hub
	for {
		h.gmu.Lock()
		old := h.byQPN[qpn]
		if old == nil || old == s {
			h.byQPN[qpn] = s
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
// routes to s.
func (g *cqGroup) routes(qpn uint32, s *sharedCQ) bool {
	g.q.pmu.Lock()
	defer g.q.pmu.Unlock()
	g.hub.gmu.RLock()
	defer g.hub.gmu.RUnlock()
	return g.hub.byQPN[qpn] == s
}

// remove stops routing qpn's completions to s: from now on they are
// strays, counted and dropped.
func (g *cqGroup) remove(qpn uint32, s *sharedCQ) {
	g.hub.gmu.Lock()
	if g.hub.byQPN[qpn] == s {
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
		g.q.pmu.Lock()
		g.q.pollAll()
		g.q.letGo(nil)
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
		g.q.pmu.Lock() // nobody polls: the poller is gone, no waiter is left
		if err := g.q.cq.Close(); err != nil {
			h.t.o.Logger.Error("freeing a shared completion queue", zap.Error(err))
		}
		g.q.pmu.Unlock()
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
		if g != nil {
			g.q.event(nil)
		}
	}
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
		s := h.byQPN[qpn]
		h.gmu.RUnlock()
		if s == nil {
			h.t.counters.strayCompletions.Add(uint64(len(run)))
			continue
		}
		s.c.completed(run)
	}
}

// joinShared attaches a new connection to a group of the device's hub:
// bound is the most work requests it has outstanding at once, its share
// of the group's CQ.
func (t *Transport) joinShared(c *conn, bound int) (*sharedCQ, error) {
	g, err := t.joinHub(c.dev, bound)
	if err != nil {
		return nil, err
	}
	return &sharedCQ{g: g, c: c}, nil
}

func (s *sharedCQ) queue() *cqCore { return s.g.q }

func (s *sharedCQ) attach(c *conn) { s.g.add(c.qp.Num(), s) }

func (s *sharedCQ) start(c *conn) {
	s.started.Store(true)
	s.wake(c) // if it began closing already
}

// wake runs the teardown once the connection both started and began
// closing (whichever comes last starts it).
func (s *sharedCQ) wake(c *conn) {
	if s.started.Load() && c.sig.IsSet() && s.tdStarted.CompareAndSwap(false, true) {
		go c.teardown()
	}
}

// watch is what a waiter of c does when another goroutine holds the shared
// CQ (drive found it taken) while a reply is expected on c: for c's spin
// budget it watches w and keeps trying the CQ, yielding the processor,
// instead of sleeping at once — the holder (another connection's waiter,
// perhaps the peer's in this process) is likely to deliver c's reply
// soon, and a sleep costs a wake-up. It reports whether w fired or it
// handled completions. Reads the clock every spinCheckEvery tries only.
func (s *sharedCQ) watch(c *conn, w chan struct{}, spin bool) bool {
	if !spin || c.o.PollSpin <= 0 || !c.expect.Load() || c.bigSend.Load() {
		return false
	}
	d := c.spinBudget()
	start := time.Now()
	for i := 1; !c.closing.Load(); i++ {
		runtime.Gosched()
		if fired(w) || s.g.q.drive(c, w, false) {
			return true
		}
		if i%spinCheckEvery == 0 && time.Since(start) >= d {
			return false
		}
	}
	return false
}

// rousable: a woken Recv that finds the group's queue taken watches it
// for the reply (watch).
func (s *sharedCQ) rousable() bool { return true }

// settle handles what the group's queue holds (its teardown cannot hold
// the queue for good: other connections' waiters poll it).
func (s *sharedCQ) settle(*conn) {
	s.hold(nil)
	s.unhold(nil)
}

func (s *sharedCQ) hold(*conn) {
	s.g.q.pmu.Lock()
	s.g.q.pollAll()
}

func (s *sharedCQ) unhold(*conn) { s.g.q.letGo(nil) }

// drain makes sure c's completions are handled until deadline (or stop):
// it polls the group if it can, else waits until whoever polls handles
// one of c's (tdWake). It reports whether it saw progress.
func (s *sharedCQ) drain(c *conn, deadline time.Time, stop <-chan struct{}) bool {
	q := s.g.q
	if q.pmu.TryLock() {
		n := q.pollOnce()
		q.letGo(nil)
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

// free destroys the QP under the group's lock, handles its last
// completions, and only then takes its number out of the table: until the
// QP is gone no other can have its number, and a new QP that gets it
// waits in add for this lock (a completion of this QP's still in the CQ
// would be routed to it). Then it leaves the group, giving back its place
// in the CQ's bound if drained.
func (s *sharedCQ) free(c *conn, drained bool) {
	s.hold(c)
	if c.qp != nil {
		c.closeVerbs(c.qp)
		s.g.q.pollAll()
		s.g.remove(c.qp.Num(), s)
	}
	s.unhold(c)
	c.t.leaveHub(s.g, drained)
}

func (s *sharedCQ) abandon(c *conn) {
	if c.qp != nil {
		_ = c.qp.ToError()
	}
	s.free(c, true)
}
