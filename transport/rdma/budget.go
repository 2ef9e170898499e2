package rdma

import (
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
)

// ErrMemoryBudget is wrapped when a connection would take the transport's
// registered memory beyond its budget (Options.MemoryBudget): the handshake
// is refused instead of pinning pages until the kernel kills the process.
var ErrMemoryBudget = errors.New("rdma: registered-memory budget exhausted")

// budget counts the registered (pinned) memory of a transport's
// connections against a limit.
type budget struct {
	mu     sync.Mutex
	limit  int64 // <= 0: no limit
	used   int64
	source string      // where limit came from, for the log
	log    *zap.Logger // the first refusal is logged
	once   sync.Once
}

// take reserves n bytes, or says why not.
func (b *budget) take(n int64) error {
	b.mu.Lock()
	if b.limit > 0 && b.used+n > b.limit {
		err := fmt.Errorf("%w: %d bytes more wanted, %d of %d in use (the budget is %s)", ErrMemoryBudget, n, b.used, b.limit, b.source)
		b.mu.Unlock()
		b.refused(n, err)
		return err
	}
	b.used += n
	b.mu.Unlock()
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

// budgetSource says where the default budget came from, for the refusal's
// log line; set by New when Options.MemoryBudget was left to the default.
func budgetSource(defaulted bool) string {
	if !defaulted {
		return "Options.MemoryBudget"
	}
	_, says := rdmadev.ReadPinning().Budget()
	return says
}

// refused logs the first refusal of a transport, once: the budget and where
// it came from, what was asked, and what to change. Later refusals are
// errors the caller sees; the operator needs the advice once.
func (b *budget) refused(n int64, err error) {
	b.once.Do(func() {
		if b.log == nil {
			return
		}
		b.log.Warn("registered-memory budget reached: connections are refused until some close",
			zap.String("budget", rdmadev.Bytes(b.limit)), zap.String("from", b.source),
			zap.String("in_use", rdmadev.Bytes(b.inUse())), zap.String("wanted", rdmadev.Bytes(n)),
			zap.String("advice", "with the shared receive queue (Options.Receive: ReceiveShared) a connection costs tens of KiB, not MiB; "+rdmadev.RaiseAdvice+
				"; or set Options.MemoryBudget"),
			zap.Error(err))
	})
}
