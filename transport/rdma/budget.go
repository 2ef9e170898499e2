package rdma

import (
	"errors"
	"fmt"
	"sync"
)

// ErrMemoryBudget is wrapped when a connection would take the transport's
// registered memory beyond its budget (Options.MemoryBudget): the handshake
// is refused instead of pinning pages until the kernel kills the process.
var ErrMemoryBudget = errors.New("rdma: registered-memory budget exhausted")

// budget counts the registered (pinned) memory of a transport's
// connections against a limit.
type budget struct {
	mu    sync.Mutex
	limit int64 // <= 0: no limit
	used  int64
}

// take reserves n bytes, or says why not.
func (b *budget) take(n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit > 0 && b.used+n > b.limit {
		return fmt.Errorf("%w: %d bytes more wanted, %d of %d in use", ErrMemoryBudget, n, b.used, b.limit)
	}
	b.used += n
	return nil
}

// give returns n bytes taken before.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// defaultBudget is a quarter of the machine's memory, or RLIMIT_MEMLOCK
// when that is lower (registering beyond it fails anyway); 0 when neither
// is known.
func defaultBudget() int64 {
	ram, lock := totalRAM(), memlockLimit()
	b := ram / 4
	if lock > 0 && (b <= 0 || lock < b) {
		b = lock
	}
	return b
}
