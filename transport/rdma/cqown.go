package rdma

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// ownCQ is the per-connection completion layout
// (CompletionsPerConnection): the connection has a completion queue, a
// completion channel and a poller goroutine of its own, which, once the
// connection closes, holds the queue for good and runs the teardown.
type ownCQ struct {
	q  *cqCore
	ch *verbs.CompChannel
}

// newOwnCQ makes c's completion channel and a queue of entries for it.
func newOwnCQ(c *conn, entries int) (*ownCQ, error) {
	ch, err := c.dev.ctx.NewCompChannel()
	if err != nil {
		return nil, err
	}
	cq, err := c.dev.ctx.CreateCQ(entries, ch)
	if err != nil {
		if err := ch.Close(); err != nil {
			c.log.Error("freeing verbs resources", zap.Error(err))
		}
		return nil, err
	}
	return &ownCQ{q: newCQCore(cq, c.t, c.completed, c.closing.Load, c.fail), ch: ch}, nil
}

func (o *ownCQ) queue() *cqCore { return o.q }

func (o *ownCQ) attach(*conn) {}

func (o *ownCQ) start(c *conn) { go o.poll(c) }

func (o *ownCQ) wake(*conn) { o.ch.Wake() }

// watch: the holder is the connection's own poller or another of its
// waiters, which wakes this one when it handles what it waits for.
func (o *ownCQ) watch(*conn, chan struct{}, bool) bool { return false }

func (o *ownCQ) rousable() bool {
	if !o.q.pmu.TryLock() {
		return false // somebody polls: it delivers the reply
	}
	// Only looked: the queue stays as armed as it was.
	o.q.pmu.Unlock()
	return true
}

// poll is the poller goroutine: it sleeps on the completion channel and
// handles what nobody else is polling for; when the connection closes it
// takes the queue for good and tears the connection down.
func (o *ownCQ) poll(c *conn) {
	o.q.pmu.Lock()
	o.q.letGo(c) // arms the queue
	for !c.closing.Load() {
		_, err := o.ch.Wait(context.Background())
		if c.closing.Load() {
			break
		}
		if err != nil && !errors.Is(err, verbs.ErrWoken) {
			c.fail(fmt.Errorf("waiting for completions: %w", err))
			break
		}
		o.q.event(c)
	}
	o.q.pmu.Lock()
	c.teardown()
}

// settle: the teardown holds the queue for good already.
func (o *ownCQ) settle(*conn) { o.q.pollAll() }

func (o *ownCQ) hold(*conn) {}

func (o *ownCQ) unhold(*conn) {}

// drain polls; when the queue is empty it arms it and sleeps on the
// channel until deadline. stop is not watched: a completion or the
// deadline ends the wait.
func (o *ownCQ) drain(_ *conn, deadline time.Time, _ <-chan struct{}) bool {
	q := o.q
	n, err := q.cq.Poll(q.wcs)
	if err != nil {
		return false
	}
	if n == 0 {
		if q.cq.ReqNotify(false) != nil {
			return false
		}
		if n, _ = q.cq.Poll(q.wcs); n == 0 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_, err := o.ch.Wait(ctx)
			if errors.Is(err, verbs.ErrWoken) { // the wake that ended poll
				_, err = o.ch.Wait(ctx)
			}
			cancel()
			if err != nil {
				return false
			}
			if n, _ = q.cq.Poll(q.wcs); n == 0 {
				return false
			}
		}
	}
	q.handle(q.wcs[:n])
	return true
}

// free destroys the QP, handles what it completed before its destroy
// returned (shared receive buffers go back to their pool), then frees the
// queue and the channel.
func (o *ownCQ) free(c *conn, _ bool) {
	if c.qp != nil {
		c.closeVerbs(c.qp)
	}
	o.q.pollAll()
	c.closeVerbs(o.q.cq, o.ch)
}

func (o *ownCQ) abandon(c *conn) {
	if c.qp != nil {
		_ = c.qp.ToError()
		o.q.pmu.Lock() // nobody else polls: it never started
		o.q.pollAll()
		o.q.pmu.Unlock()
	}
	o.free(c, true)
}
