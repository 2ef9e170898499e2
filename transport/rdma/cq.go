package rdma

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// cqCore is a completion queue and the right to poll it: the polling core
// both completion layouts run, over a connection's own queue (ownCQ) or a
// queue its group of connections shares (cqGroup). Whoever holds pmu polls
// and hands every completion it finds to handle; whoever lets go arms the
// queue first, so that while pmu is free a completion raises an event for
// the layout's poller goroutine.
type cqCore struct {
	cq    *verbs.CQ
	pmu   sync.Mutex
	wcs   []verbs.WorkCompletion // pmu's
	pl    sync.Mutex
	armed bool // pl's: the CQ is armed and its event not yet read

	ctr      *counters
	pollSpin time.Duration
	// handle takes a batch of completions, with pmu held: the
	// connection's handler, or the group's dispatch to its connections.
	handle func([]verbs.WorkCompletion)
	// stopped reports that the queue is no longer armed: its connection
	// is closing, or its group's hub stopping.
	stopped func() bool
	// failed is told that polling or arming the queue failed.
	failed func(error)
}

func newCQCore(cq *verbs.CQ, t *Transport, handle func([]verbs.WorkCompletion), stopped func() bool, failed func(error)) *cqCore {
	return &cqCore{
		cq: cq, wcs: make([]verbs.WorkCompletion, 32),
		ctr: &t.counters, pollSpin: t.o.PollSpin,
		handle: handle, stopped: stopped, failed: failed,
	}
}

// pollOnce polls the queue once and handles what it returns. Called with
// pmu held.
func (q *cqCore) pollOnce() int {
	n, err := q.cq.Poll(q.wcs)
	if err != nil {
		q.failed(fmt.Errorf("polling completions: %w", err))
		return 0
	}
	if n > 0 {
		q.handle(q.wcs[:n])
	}
	return n
}

// pollAll handles completions until the queue is empty. Called with pmu
// held.
func (q *cqCore) pollAll() {
	for q.pollOnce() > 0 {
	}
}

// letGo releases pmu, arming the queue first unless it still is, so that
// the poller wakes for the next completion if nobody polls by then. c, the
// connection whose goroutine held it, if any, first posts the receive
// buffers released meanwhile.
func (q *cqCore) letGo(c *conn) {
	if c != nil {
		c.flushUnposted()
	}
	q.pl.Lock()
	if !q.armed && !q.stopped() {
		q.armed = true
		q.ctr.cqArms.Add(1)
		if err := q.cq.ReqNotify(false); err != nil {
			q.failed(fmt.Errorf("arming the completion queue: %w", err))
		} else {
			// Completions that came before arming raised no event, and
			// none will come for them: drain the queue, not one batch of
			// it, or what is left waits for a completion that may never
			// come (the peer waiting for the credits those hold).
			for q.pollOnce() == len(q.wcs) {
			}
		}
	}
	q.pmu.Unlock()
	q.pl.Unlock()
}

// event is the poller's part once it read the queue's event: the queue is
// no longer armed; it handles the completions if nobody holds the queue
// (else the holder re-arms when it lets go). The check and the mark are
// one step under pl against letGo's "arm unless armed, then let go", or an
// event read while a holder lets go would be lost with nobody armed.
func (q *cqCore) event(c *conn) {
	q.ctr.cqEvents.Add(1)
	q.pl.Lock()
	q.armed = false
	mine := q.pmu.TryLock()
	q.pl.Unlock()
	if !mine {
		return
	}
	q.stream()
	q.letGo(c)
}

// drive polls the queue for c's waiter if nobody else does, and reports
// whether it handled completions. While it may spin it keeps the queue
// until w fires (or the spin ends), not only until it handled something:
// the completion of its own send comes before the reply it waits for, and
// letting go in between re-armed the queue, so the reply raised an event
// and woke the poller, which, when it took the queue in the gap, spun and
// handed the reply over with a wake-up.
func (q *cqCore) drive(c *conn, w chan struct{}, spin bool) bool {
	if c.closing.Load() || !q.pmu.TryLock() {
		return false
	}
	handled := false
	for range driveRounds {
		if c.closing.Load() {
			break
		}
		if q.pollOnce() > 0 {
			handled = true
			if fired(w) {
				break
			}
		}
		d := c.spinNow(spin)
		if d <= 0 || !q.spinFor(c, d) {
			break
		}
		handled = true
		if fired(w) {
			break
		}
	}
	q.letGo(c)
	return handled
}

// driveRounds bounds how many times a waiter spins on after handling
// completions that did not wake it (its send's completion, a credit
// grant; on a shared CQ, other connections' traffic) before it lets go:
// a goroutine that takes pmu with Lock (a teardown) gets its turn, and a
// waiter whose reply does not come stops serving as everyone's poller.
const driveRounds = 4

// spinFor polls for up to d, yielding the processor between polls, while
// c (if any) is open; it reports whether it handled completions. It reads
// the clock every spinCheckEvery polls only. Called with pmu held.
func (q *cqCore) spinFor(c *conn, d time.Duration) bool {
	start := time.Now()
	for i := 1; (c == nil || !c.closing.Load()) && !q.stopped(); i++ {
		runtime.Gosched()
		if q.pollOnce() > 0 {
			return true
		}
		if i%spinCheckEvery == 0 && time.Since(start) >= d {
			return false
		}
	}
	return false
}

// stream handles completions while they keep coming: after each batch it
// polls on for up to streamSpin. Nothing at first (a waiter took them):
// no spin. Called with pmu held.
func (q *cqCore) stream() {
	if q.pollOnce() == 0 {
		return
	}
	for {
		q.pollAll()
		if q.pollSpin <= 0 || !q.spinFor(nil, streamSpin) {
			return
		}
	}
}

// fired reports whether w was signalled, taking the signal: the waiter
// looks at its condition again instead of sleeping.
func fired(w chan struct{}) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}

// completionLayout is where a connection's completions come from and how
// its life cycle meets them: a completion queue, channel and poller
// goroutine of its own (ownCQ), or a queue shared by a group of the
// device's connections, with one channel and poller for all (sharedCQ,
// cqshare.go). The polling core (cqCore), the handling of completions and
// the teardown are the same for both; only these steps differ.
type completionLayout interface {
	// queue is the completion queue c's waiters poll.
	queue() *cqCore
	// attach routes the completions of c's new QP to it.
	attach(c *conn)
	// start runs what handles c's completions while nobody waits.
	start(c *conn)
	// wake gets c's teardown going: it began closing.
	wake(c *conn)
	// watch is what c's waiter does when another goroutine holds the
	// queue: it reports whether w fired or it handled completions
	// meanwhile; false sends the waiter to sleep.
	watch(c *conn, w chan struct{}, spin bool) bool
	// rousable reports whether a sleeping Recv, woken now, would find the
	// queue to poll for its reply.
	rousable() bool

	// The teardown's steps. settle handles what completed before the QP
	// goes to ERR; hold keeps every other goroutine from handling c's
	// completions until unhold; drain waits until deadline (or stop) for
	// c's completions and handles them, reporting whether it did.
	settle(c *conn)
	hold(c *conn)
	unhold(c *conn)
	drain(c *conn, deadline time.Time, stop <-chan struct{}) bool
	// free destroys c's QP and what the layout made for it, after the
	// teardown; drained: none of c's work requests is still outstanding.
	free(c *conn, drained bool)
	// abandon does the same for a connection that never started (its
	// handshake failed): what its QP flushes is handled first.
	abandon(c *conn)
}
