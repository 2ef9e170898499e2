package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// srqPool is the shared receive queue of one device of a Transport, and
// the buffers posted on it (Options.Receive; docs/rdma.md, "Shared
// receive queue"). Every connection on the device takes its receives from
// it; acct commits its buffers to the connections' windows, so that the
// buffers posted always cover what every peer may send.
//
// It grows in chunks of chunkBufs buffers, one registered region each,
// charged to the transport's budget: when a connection joins and the pool
// lacks its guaranteed window, and when lent credits run short (up to
// lendRoom buffers beyond the guaranteed windows). It does not shrink: a
// buffer posted on a shared queue comes off it only when a message lands
// in it. Lock order: a connection's rmu, then mu.
type srqPool struct {
	t       *Transport
	pd      *verbs.PD
	srq     *verbs.SRQ
	bufSize int
	maxBufs int                         // what the SRQ holds
	base    int                         // what each connection commits at least: SharedCredits + credit.Extra
	chunks  atomic.Pointer[[]*verbs.MR] // copied on grow: read without a lock

	mu        sync.Mutex
	grown     sync.Cond // on mu: a grow finished
	acct      credit.Pool
	conns     int  // connections joined
	wantGrow  bool // a lend found too few spare buffers
	growing   bool // a grow is registering a chunk (outside mu)
	charged   int64
	destroyed bool

	stopEvents context.CancelFunc
	eventsDone chan struct{}

	// Every buffer is on the SRQ, or was taken from it by a QP: posted
	// counts posts, taken the receive completions the connections handled
	// (added up when each is torn down). When the pool is destroyed the
	// difference must be every buffer; what is missing was lost
	// (shared_recvs_lost).
	posted, taken atomic.Int64

	// A closing connection waits for its QP's LAST_WQE_REACHED event
	// (expectLastWQE), routed here by QP number from the device's event
	// reader; emits is set once the device raised one at all.
	wmu     sync.Mutex
	lastWQE map[uint32]chan struct{} // wmu's
	emits   atomic.Bool
}

// lastWQESettle is how long a teardown keeps an SRQ QP moved to ERR, its
// completions still handled, before destroying it, on a device that has
// not shown it raises LAST_WQE_REACHED (rxe on Linux 6.1 never does). A
// receive the QP took from the SRQ mid-message is flushed by the device's
// responder once it sees the ERR state, soon after the transition (within
// the first poll in every case testbed's probe saw, TestSRQFlushOnError);
// destroyed before that, the buffer is gone without a completion.
const lastWQESettle = 20 * time.Millisecond

const (
	// chunkBufs is how many buffers one registration adds to a pool.
	chunkBufs = 32
	// srqLimit is the SRQ limit armed as a safety net: with N connections
	// at least 2N buffers stay posted (their control receives), so below
	// this the invariant is broken (or N is tiny); the pool then grows a
	// chunk and says so.
	srqLimit = chunkBufs / 4
	// maxSRQ bounds a shared receive queue's size (its ring is allocated
	// whole, 1 << 16 entries are a few MiB).
	maxSRQ = 1 << 16
	// lendFloor is the fewest buffers a pool may hold for lent credits
	// beyond the guaranteed windows; with more connections, half a buffer
	// each (see lendRoom).
	lendFloor = 2 * chunkBufs
)

// sharedPool returns the device's pool, creating it for the first
// connection. Called with the device acquired.
func (t *Transport) sharedPool(dev *device) (*srqPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if dev.pool != nil {
		return dev.pool, nil
	}
	attr, err := dev.ctx.QueryDevice()
	if err != nil {
		return nil, err
	}
	if attr.MaxSRQ == 0 || attr.MaxSRQWR == 0 {
		return nil, fmt.Errorf("rdma: device %s has no shared receive queues (set Options.Receive to ReceivePerConnection)", dev.name)
	}
	// The queue's ring is allocated (and mapped) whole: size it for what
	// the budget can hold, not the device's maximum.
	maxWR := min(attr.MaxSRQWR, maxSRQ)
	if lim := t.budget.limit; lim > 0 {
		maxWR = min(maxWR, max(2*chunkBufs, int(lim/int64(t.o.BufferSize))+chunkBufs))
	}
	srq, err := dev.pd.CreateSRQ(maxWR)
	if err != nil {
		return nil, err
	}
	p := &srqPool{t: t, pd: dev.pd, srq: srq, bufSize: t.o.BufferSize, maxBufs: srq.MaxWR(), base: t.o.SharedCredits + credit.Extra}
	p.grown.L = &p.mu
	p.chunks.Store(&[]*verbs.MR{})
	ctx, cancel := context.WithCancel(context.Background())
	p.stopEvents, p.eventsDone = cancel, make(chan struct{})
	go p.watchEvents(ctx, dev.ctx)
	dev.pool = p
	return p, nil
}

// join commits a new connection's guaranteed window and control receives,
// growing the pool when it lacks them; an error wraps ErrMemoryBudget when
// the budget cannot hold another chunk.
func (p *srqPool) join(window int) error {
	n := window + credit.Extra
	for {
		p.mu.Lock()
		if p.acct.Commit(n) {
			p.conns++
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		if err := p.grow(); err != nil {
			return err
		}
	}
}

// leave releases n buffers committed to a connection that left (or, later,
// one of its buffers that a user held).
func (p *srqPool) leave(n int, conn bool) {
	p.mu.Lock()
	p.acct.Release(n)
	if conn {
		p.conns--
	}
	p.mu.Unlock()
}

// release gives back n buffers a window no longer needs.
func (p *srqPool) release(n int) { p.leave(n, false) }

// lend commits up to n spare buffers to a window and returns how many;
// when short it asks for a grow (growIfWanted, outside the connection's
// locks), if the pool may grow for lending.
func (p *srqPool) lend(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.acct.CommitUpTo(min(n, p.lendableLocked()))
	if k < n && p.acct.Buffers()+chunkBufs <= p.conns*p.base+p.lendRoom() {
		p.wantGrow = true
	}
	return k
}

// lendSpare commits up to n spare buffers without asking for a grow.
func (p *srqPool) lendSpare(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acct.CommitUpTo(min(n, p.lendableLocked()))
}

// lendableLocked is how many more credits may be lent: all lent credits
// together stay within lendRoom, so that a grow for a join is not eaten by
// lends (and the pool by them). Called with mu held.
func (p *srqPool) lendableLocked() int {
	return max(0, p.conns*p.base+p.lendRoom()-p.acct.Committed())
}

// lendRoom is how many buffers beyond the guaranteed windows the pool may
// grow to for lent credits: half a buffer per connection, at least
// lendFloor. It bounds what an idle pool keeps registered (it does not
// shrink): (g + 2 + 1/2) buffers per connection. Called with mu held.
func (p *srqPool) lendRoom() int { return max(lendFloor, p.conns/2) }

// growIfWanted grows the pool when a lend found it short.
func (p *srqPool) growIfWanted() {
	p.mu.Lock()
	want := p.wantGrow
	p.mu.Unlock()
	if !want {
		return
	}
	if err := p.grow(); err != nil {
		p.t.o.Logger.Debug("not growing the shared receive pool for lent credits", zap.Error(err))
	}
}

// grow registers one more chunk of buffers and posts them all. Concurrent
// callers wait for one grow instead of registering a chunk each.
func (p *srqPool) grow() error {
	p.mu.Lock()
	if p.growing {
		// Another caller registers a chunk: let it finish; the caller
		// then retries its commit.
		for p.growing {
			p.grown.Wait()
		}
		p.mu.Unlock()
		return nil
	}
	if p.destroyed {
		p.mu.Unlock()
		return fmt.Errorf("rdma: shared receive pool closed")
	}
	if p.acct.Buffers()+chunkBufs > p.maxBufs {
		p.mu.Unlock()
		return fmt.Errorf("%w: the device's shared receive queue holds at most %d buffers", ErrMemoryBudget, p.maxBufs)
	}
	p.growing = true
	p.wantGrow = false
	old := *p.chunks.Load()
	base := len(old) * chunkBufs
	p.mu.Unlock()
	size := chunkBufs * p.bufSize
	mr, err := p.register(size)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.growing = false
	p.grown.Broadcast()
	if err != nil {
		return err
	}
	p.charged += int64(size)
	chunks := append(old[:len(old):len(old)], mr)
	p.chunks.Store(&chunks)
	bufs := make([]int32, chunkBufs)
	for i := range bufs {
		bufs[i] = int32(base + i)
	}
	if err := p.post(bufs); err != nil {
		return err
	}
	p.acct.Grow(chunkBufs)
	return nil
}

// register takes size bytes from the budget and registers them.
func (p *srqPool) register(size int) (*verbs.MR, error) {
	if err := p.t.budget.take(int64(size)); err != nil {
		return nil, err
	}
	mr, err := p.pd.Register(size)
	if err != nil {
		p.t.budget.give(int64(size))
		return nil, fmt.Errorf("registering %d shared receive buffers of %d bytes: %w", chunkBufs, p.bufSize, err)
	}
	return mr, nil
}

// wr is the receive work request of buffer i.
func (p *srqPool) wr(i int32) verbs.RecvWR {
	return verbs.RecvWR{
		ID: recvTag | uint64(i), MR: (*p.chunks.Load())[int(i)/chunkBufs],
		Offset: uint32(int(i) % chunkBufs * p.bufSize), Length: uint32(p.bufSize),
	}
}

// bytes returns the memory of buffer i.
func (p *srqPool) bytes(i int32) []byte {
	mr := (*p.chunks.Load())[int(i)/chunkBufs]
	off := int(i) % chunkBufs * p.bufSize
	return mr.Bytes()[off : off+p.bufSize]
}

// post posts buffers on the shared queue (no accounting: a buffer is the
// pool's whether posted or held). It takes no lock: the queue is destroyed
// only once nobody can post (no connection left, no buffer lent).
func (p *srqPool) post(bufs []int32) error {
	var batch [16]verbs.RecvWR
	for len(bufs) > 0 {
		wrs := batch[:0]
		for len(bufs) > 0 && len(wrs) < len(batch) {
			wrs = append(wrs, p.wr(bufs[0]))
			bufs = bufs[1:]
		}
		if err := p.postRecv(wrs); err != nil {
			return fmt.Errorf("posting shared receives: %w", err)
		}
		p.t.counters.recvsPosted.Add(uint64(len(wrs)))
	}
	return nil
}

// postRecv posts receive work requests of the pool's buffers on the SRQ
// and counts them.
func (p *srqPool) postRecv(wrs []verbs.RecvWR) error {
	if err := p.srq.PostRecv(wrs); err != nil {
		return err
	}
	p.posted.Add(int64(len(wrs)))
	return nil
}

// expectLastWQE returns a channel closed when the device reports that the
// QP qpn (about to be moved to ERR) will take no more receives from the
// SRQ; stopExpecting forgets it.
func (p *srqPool) expectLastWQE(qpn uint32) <-chan struct{} {
	ch := make(chan struct{})
	p.wmu.Lock()
	if p.lastWQE == nil {
		p.lastWQE = make(map[uint32]chan struct{})
	}
	p.lastWQE[qpn] = ch
	p.wmu.Unlock()
	return ch
}

func (p *srqPool) stopExpecting(qpn uint32) {
	p.wmu.Lock()
	delete(p.lastWQE, qpn)
	p.wmu.Unlock()
}

// lastWQEReached hands the event to the teardown waiting for it.
func (p *srqPool) lastWQEReached(qpn uint32) {
	p.emits.Store(true)
	p.wmu.Lock()
	if ch := p.lastWQE[qpn]; ch != nil {
		close(ch)
		delete(p.lastWQE, qpn)
	}
	p.wmu.Unlock()
}

// settleBound is until when a teardown whose QP went to ERR at start
// waits for its LAST_WQE_REACHED: the close deadline on a device known to
// raise it, else lastWQESettle.
func (p *srqPool) settleBound(deadline time.Time) time.Time {
	if p.emits.Load() {
		return deadline
	}
	return minTime(deadline, time.Now().Add(lastWQESettle))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lastWQEDone counts how a teardown's wait for LAST_WQE_REACHED ended and
// reports whether the QP may be destroyed with nothing of the SRQ's left
// on it: the event came, or the device never raises it and the settle
// passed. On a device that raises it, a wait that ran out is counted and
// reported unsafe (the caller keeps the QP's CQ place).
func (p *srqPool) lastWQEDone(qpn uint32, ev <-chan struct{}) bool {
	select {
	case <-ev:
		return true
	default:
	}
	p.stopExpecting(qpn)
	if p.emits.Load() {
		p.t.counters.lastWQEMissed.Add(1)
		return false
	}
	p.t.counters.lastWQESettled.Add(1)
	return true
}

// destroy frees the queue and its memory, once no connection uses the
// device (so no QP is attached and no buffer is lent). Called with t.mu
// held, before the device's PD is closed.
func (p *srqPool) destroy() {
	p.stopEvents()
	<-p.eventsDone
	p.mu.Lock()
	defer p.mu.Unlock()
	p.destroyed = true
	if lost := int64(p.acct.Buffers()) - (p.posted.Load() - p.taken.Load()); lost != 0 {
		p.t.counters.sharedRecvsLost.Add(uint64(max(lost, 0)))
		p.t.o.Logger.Error("shared receive buffers unaccounted for when the pool closed",
			zap.Int64("missing", lost), zap.Int("buffers", p.acct.Buffers()))
	}
	if err := p.srq.Close(); err != nil {
		p.t.o.Logger.Error("closing the shared receive queue", zap.Error(err))
	}
	for _, mr := range *p.chunks.Load() {
		if err := mr.Close(); err != nil {
			p.t.o.Logger.Error("deregistering shared receive buffers", zap.Error(err))
		}
	}
	p.chunks.Store(&[]*verbs.MR{})
	p.t.budget.give(p.charged)
	p.charged = 0
}

// sharedBytes is what the transport's shared receive queues registered.
func (t *Transport) sharedBytes() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for _, d := range t.devices {
		if p := d.pool; p != nil {
			p.mu.Lock()
			n += p.charged
			p.mu.Unlock()
		}
	}
	return n
}

// watchEvents reads the device's asynchronous events while the pool
// lives: LAST_WQE_REACHED goes to the teardown of its QP; the SRQ limit event (the safety net: the queue ran low, which the
// credits should make impossible) grows the pool by a chunk and re-arms.
// Other events are for the connections' own error handling (a failed work
// request closes its connection), so they are only logged.
func (p *srqPool) watchEvents(ctx context.Context, dctx *verbs.Context) {
	defer close(p.eventsDone)
	log := p.t.o.Logger
	arm := func() {
		if err := p.srq.Arm(min(srqLimit, p.maxBufs-1)); err != nil {
			log.Warn("arming the shared receive queue's limit", zap.Error(err))
		}
	}
	arm()
	for {
		ev, err := dctx.AsyncEvent(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, verbs.ErrClosed) {
				log.Warn("reading device events", zap.Error(err))
			}
			return
		}
		if ev.Type == verbs.EventQPLastWQEReached {
			p.lastWQEReached(ev.QPNum)
			continue
		}
		if ev.Type != verbs.EventSRQLimitReached {
			log.Debug("device event", zap.Stringer("event", ev))
			continue
		}
		p.t.counters.srqLimitEvents.Add(1)
		p.mu.Lock()
		conns := p.conns
		p.mu.Unlock()
		if conns >= srqLimit/2 {
			log.Error("the shared receive queue ran low: a credit accounting bug; refilling", zap.Int("connections", conns))
		}
		if err := p.grow(); err != nil {
			log.Warn("refilling the shared receive queue", zap.Error(err))
		}
		arm()
	}
}
