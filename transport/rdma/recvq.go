package rdma

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// recvQueue is where a connection's receive buffers live and how a receive
// is posted (Options.Receive): a receive queue and registered buffers of
// the connection's own (ownRecvs), or the device's shared receive queue
// (sharedRecvs, over the srqPool). The receive path is written once over
// it; what only a pool has (lent credits, its accounting at teardown) is
// the pool's.
//
// It picks its implementation in each method rather than through an
// interface: work requests are built in a batch on the caller's stack, and
// a slice passed through an interface method escapes, which cost an
// allocation per message.
type recvQueue struct {
	own    *ownRecvs
	shared sharedRecvs // with own nil
}

// wr is the work request that posts receive buffer buf.
func (q *recvQueue) wr(buf int32) verbs.RecvWR {
	if q.own != nil {
		return q.own.wr(buf)
	}
	return q.shared.wr(buf)
}

// bytes is receive buffer buf's memory, n bytes of it.
func (q *recvQueue) bytes(buf int32, n int) []byte {
	if q.own != nil {
		return q.own.bytes(buf, n)
	}
	return q.shared.bytes(buf, n)
}

// post posts receives (again); errRecvStopped once stop was called.
func (q *recvQueue) post(wrs []verbs.RecvWR) error {
	if q.own != nil {
		return q.own.post(wrs)
	}
	return q.shared.post(wrs)
}

// fill posts the first n buffers of a new connection's, with its QP in
// INIT (the pool's are posted already).
func (q *recvQueue) fill(n int) error {
	if q.own != nil {
		return q.own.fill(n)
	}
	return nil
}

// stop: the QP is going to ERR; nothing more is posted on a queue of its
// own (the shared queue goes on: the QP's flushed receives go back to it).
func (q *recvQueue) stop() {
	if q.own != nil {
		q.own.stop()
	}
}

// lost takes back buffer buf of a receive that failed or was flushed: it
// never arrived, so no credit is owed for it. An own buffer is not posted
// again; a shared one goes back on the pool's queue.
func (q *recvQueue) lost(buf int32) {
	if q.own == nil {
		q.shared.lost(buf)
	}
}

// errRecvStopped: the QP is going to ERR, a receive is not posted again.
var errRecvStopped = errors.New("the receive queue is stopped")

// ownRecvs is the connection's own receive queue (its QP's) and buffers.
type ownRecvs struct {
	qp          *verbs.QP
	mr          *verbs.MR // the buffers, bufSize each
	bufSize     int
	outstanding *atomic.Int32 // the receiver's recvOutstanding

	mu      sync.Mutex // a leaf: post against stop
	stopped bool
}

func (q *ownRecvs) wr(buf int32) verbs.RecvWR {
	return verbs.RecvWR{ID: recvTag | uint64(buf), MR: q.mr, Offset: uint32(int(buf) * q.bufSize), Length: uint32(q.bufSize)}
}

func (q *ownRecvs) bytes(buf int32, n int) []byte {
	off := int(buf) * q.bufSize
	return q.mr.Bytes()[off : off+n]
}

// post counts the receives outstanding before they can complete, unless
// the teardown stopped the queue: rxe flushes a receive queue when its QP
// enters ERR, not a receive posted after that, which would never complete
// and hold the teardown for its whole grace period (and, on a shared CQ,
// its place for good).
func (q *ownRecvs) post(wrs []verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return errRecvStopped
	}
	q.outstanding.Add(int32(len(wrs)))
	if err := q.qp.PostRecv(wrs); err != nil {
		q.outstanding.Add(-int32(len(wrs)))
		return err
	}
	return nil
}

func (q *ownRecvs) fill(n int) error {
	wrs := make([]verbs.RecvWR, n)
	for i := range wrs {
		wrs[i] = q.wr(int32(i))
	}
	return q.post(wrs)
}

func (q *ownRecvs) stop() {
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
}

// sharedRecvs is a connection's view of the device's shared receive queue.
type sharedRecvs struct {
	p   *srqPool
	log *zap.Logger
}

func (q sharedRecvs) wr(buf int32) verbs.RecvWR { return q.p.wr(buf) }

func (q sharedRecvs) bytes(buf int32, n int) []byte { return q.p.bytes(buf)[:n] }

func (q sharedRecvs) post(wrs []verbs.RecvWR) error { return q.p.postRecv(wrs) }

// lost puts the buffer back on the shared queue.
func (q sharedRecvs) lost(buf int32) {
	if err := q.p.post([]int32{buf}); err != nil {
		q.log.Debug("re-posting a flushed shared receive", zap.Error(err))
	}
}

// newRecvQueue gives c its receive queue: the pool's when it joined one,
// else buffers of its own, taken from the budget and registered.
func (c *conn) newRecvQueue() (*recvQueue, error) {
	if c.pool != nil {
		return &recvQueue{shared: sharedRecvs{p: c.pool, log: c.log}}, nil
	}
	n := c.recvs * c.o.BufferSize
	if err := c.charge(n); err != nil {
		return nil, err
	}
	mr, err := c.dev.pd.Register(n)
	if err != nil {
		return nil, fmt.Errorf("registering %d receive buffers of %d bytes: %w", c.recvs, c.o.BufferSize, err)
	}
	c.recvMR = mr
	return &recvQueue{own: &ownRecvs{qp: c.qp, mr: mr, bufSize: c.o.BufferSize, outstanding: &c.recvOutstanding}}, nil
}
