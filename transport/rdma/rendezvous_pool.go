package rdma

import (
	"math/bits"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// readPool keeps the buffers a rendezvous receiver reads into registered
// after their message was released, so the next message of about the
// same size is read without registering (docs/rdma.md, "Rendezvous:
// registration"). One per device (its protection domain), shared by the
// transport's connections on it.
//
// The buffers are registered local-only (verbs.PD.Register): they are the
// target of this side's own RDMA Reads and grant no remote access, so
// reusing one for another message, another connection, hands no peer
// anything. A buffer's size is its class (readClass): a message takes a
// buffer of its class only, wasting at most a quarter of it.
//
// Memory: idle buffers stay charged to the transport's memory budget, at
// most idleMax bytes of them; a connection that finds the budget full
// (take) frees idle buffers first, so the pool never refuses a message or
// a handshake that would have fit without it. The pool is emptied when the
// device closes.
type readPool struct {
	// register registers a buffer: pd.Register for read buffers,
	// pd.RegisterForWindows for the senders' windowed regions.
	register func(int) (*verbs.MR, error)
	budget   *budget
	idleMax  int64
	log      *zap.Logger

	mu   sync.Mutex
	idle map[int][]*verbs.MR // by class
	// dirty: how far a windowed region holds bytes of a message (scrub).
	dirty  map[*verbs.MR]int
	inIdle int64
	closed bool
}

// readPoolCap bounds a pool's idle bytes, and so does a quarter of the
// memory budget.
const readPoolCap = 64 << 20

// newReadPool makes a pool of buffers registered by register, charged to b.
func newReadPool(register func(int) (*verbs.MR, error), b *budget, log *zap.Logger) *readPool {
	max := int64(readPoolCap)
	if b.limit > 0 && b.limit/4 < max {
		max = b.limit / 4
	}
	p := &readPool{register: register, budget: b, idleMax: max, log: log, idle: make(map[int][]*verbs.MR), dirty: make(map[*verbs.MR]int)}
	b.addPool(p)
	return p
}

var pageSize = os.Getpagesize()

// readClass rounds n up to its buffer class: whole pages, and a multiple
// of a quarter of the power of two at or below n (n = 2^k … 2^(k+1) in
// four steps), so a buffer is at most a quarter larger than its message.
func readClass(n int) int {
	if n <= pageSize {
		return pageSize
	}
	step := (1 << (bits.Len(uint(n)) - 1)) / 4
	if step < pageSize {
		step = pageSize
	}
	return (n + step - 1) / step * step
}

// get returns an idle buffer of n's class, or nil.
func (p *readPool) get(n int) *verbs.MR {
	c := readClass(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[c]
	if len(l) == 0 {
		return nil
	}
	mr := l[len(l)-1]
	p.idle[c] = l[:len(l)-1]
	p.inIdle -= int64(c)
	return mr
}

// take registers a buffer for a message of n bytes, charged to the budget
// (which frees idle buffers when it has no room otherwise). It blocks for
// the registration: never call it from a completion handler.
func (p *readPool) take(n int) (*verbs.MR, error) {
	c := readClass(n)
	if err := p.budget.take(int64(c)); err != nil {
		return nil, err
	}
	mr, err := p.register(c)
	if err != nil {
		p.budget.give(int64(c))
		return nil, err
	}
	return mr, nil
}

// put gives back a buffer take or get returned: kept while the pool has
// room, else deregistered and given back to the budget.
func (p *readPool) put(mr *verbs.MR) {
	if !p.keep(mr) {
		p.free(mr)
	}
}

// keep puts mr back in the pool if it has room, and reports whether it
// did (if not, mr is the caller's to free).
func (p *readPool) keep(mr *verbs.MR) bool {
	c := mr.Len()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.inIdle+int64(c) > p.idleMax {
		return false
	}
	p.idle[c] = append(p.idle[c], mr)
	p.inIdle += int64(c)
	return true
}

func (p *readPool) free(mr *verbs.MR) {
	p.mu.Lock()
	delete(p.dirty, mr)
	p.mu.Unlock()
	n := mr.Len()
	if err := mr.Close(); err != nil {
		p.log.Error("deregistering a rendezvous read buffer", zap.Error(err))
	}
	p.budget.give(int64(n))
}

// trim frees idle buffers until at least want bytes were given back to the
// budget, or none is left; it reports whether it freed any.
func (p *readPool) trim(want int64) bool {
	var out []*verbs.MR
	p.mu.Lock()
	var got int64
	for c, l := range p.idle {
		for len(l) > 0 && got < want {
			out = append(out, l[len(l)-1])
			l = l[:len(l)-1]
			got += int64(c)
		}
		p.idle[c] = l
		if got >= want {
			break
		}
	}
	p.inIdle -= got
	p.mu.Unlock()
	for _, mr := range out {
		p.free(mr)
	}
	return len(out) > 0
}

// idleBytes is what the pool holds idle (charged to the budget).
func (p *readPool) idleBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inIdle
}

// close frees every idle buffer; later puts free theirs. Called when the
// device closes (no connection on it is left, so no buffer is out).
func (p *readPool) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.budget.removePool(p)
	p.trim(1 << 62)
}

// scrub zeroes what an earlier message left in a windowed region past the
// n bytes of the message now in it, before a window is bound to it. A
// device that checks a window's reads against the window's bounds makes
// it redundant; rxe (6.1) checks them against the MR's, so without it a
// peer could read the tail of an earlier message, perhaps another
// connection's (docs/rdma.md, "Key lifetime").
func (p *readPool) scrub(mr *verbs.MR, n int) {
	p.mu.Lock()
	d := p.dirty[mr]
	p.dirty[mr] = n
	p.mu.Unlock()
	if d > n {
		clear(mr.Bytes()[n:d])
	}
}
