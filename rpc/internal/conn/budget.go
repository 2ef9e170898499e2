package conn

import (
	"context"
	"sync"
	"sync/atomic"
)

// ByteBudget bounds the bytes a connection holds for one purpose (encoded
// responses the transport has not taken). One request larger than the whole
// budget is let through when nothing else holds any. Taking and giving back
// bytes is lock-free while nobody waits.
type ByteBudget struct {
	max     int64
	used    atomic.Int64
	waiters atomic.Int64

	mu      sync.Mutex
	changed chan struct{} // closed when bytes come back to waiters
}

// NewByteBudget returns a budget of max bytes.
func NewByteBudget(max int) *ByteBudget { return &ByteBudget{max: int64(max)} }

// TryReserve takes n bytes unless they do not fit beside what is taken
// (with force, whatever is taken): a reservation for what a call about to
// start will hold. It never waits.
func (b *ByteBudget) TryReserve(n int, force bool) bool {
	if force {
		b.used.Add(int64(n))
		return true
	}
	return b.TryAcquire(int64(n))
}

// TryAcquire takes n bytes if they fit; it never waits.
func (b *ByteBudget) TryAcquire(n int64) bool {
	for {
		u := b.used.Load()
		if u > 0 && u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Acquire takes n bytes, waiting for them within ctx.
func (b *ByteBudget) Acquire(ctx context.Context, n int) error {
	if b.TryAcquire(int64(n)) {
		return nil
	}
	for {
		b.mu.Lock()
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		wait := b.changed
		b.waiters.Add(1)
		b.mu.Unlock()
		// A release that came before the waiter was counted is seen here.
		ok := b.TryAcquire(int64(n))
		if !ok {
			select {
			case <-wait:
				ok = b.TryAcquire(int64(n))
			case <-ctx.Done():
				b.waiters.Add(-1)
				return ctx.Err()
			}
		}
		b.waiters.Add(-1)
		if ok {
			return nil
		}
	}
}

// Release gives n bytes back, waking the waiters.
func (b *ByteBudget) Release(n int) {
	b.used.Add(-int64(n))
	if b.waiters.Load() > 0 {
		b.mu.Lock()
		if b.changed != nil {
			close(b.changed)
			b.changed = nil
		}
		b.mu.Unlock()
	}
}

// Waiting reports whether some acquire is waiting for bytes.
func (b *ByteBudget) Waiting() bool { return b.waiters.Load() > 0 }

// RespEstimate is what a unary method's running call is expected to hold of
// its response: the connection reserves it from its response budget when
// the call starts, so that the calls a connection runs at once hold about
// the budget in responses, not MaxConcurrentCalls times their size
// (docs/architecture.md, "Bounds of one connection"). It follows the
// method's responses on the connection: up at once to a larger one, down
// by an eighth at each smaller one, never under MinResponseEstimate; a
// method with none yet is expected to answer InitialResponseEstimate. nil:
// no estimate (streams, clients).
type RespEstimate struct{ n atomic.Int64 }

const (
	InitialResponseEstimate = 64 << 10
	MinResponseEstimate     = 1 << 10
)

// Get is the estimate now.
func (e *RespEstimate) Get() int {
	if v := e.n.Load(); v > 0 {
		return int(v)
	}
	return InitialResponseEstimate
}

// Observe follows a response of size bytes (nil: no estimate kept).
func (e *RespEstimate) Observe(size int) {
	if e == nil {
		return
	}
	for {
		old := e.n.Load()
		cur := old
		if cur == 0 {
			cur = InitialResponseEstimate
		}
		next := max(int64(size), cur-cur/8, MinResponseEstimate)
		if next == old || e.n.CompareAndSwap(old, next) {
			return
		}
	}
}
