package rdma

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
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

	// For the refusal's log line: where limit came from, and what the
	// transport's layout costs.
	source string
	cost   layoutCost
	log    *zap.Logger
	once   sync.Once

	// pools are the devices' idle rendezvous read buffers, charged here:
	// take frees them before it refuses anything (rendezvous_pool.go).
	pools []*readPool
}

// take reserves n bytes, or says why not. Idle pooled read buffers are
// freed first when the budget has no room otherwise: they never make a
// handshake or a message fail.
func (b *budget) take(n int64) error {
	for {
		b.mu.Lock()
		if b.limit <= 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		short := b.used + n - b.limit
		err := fmt.Errorf("%w: %d bytes more wanted, %d of %d in use (the budget is %s)", ErrMemoryBudget, n, b.used, b.limit, b.source)
		pools := b.pools
		b.mu.Unlock()
		freed := false
		for _, p := range pools {
			if p.trim(short) {
				freed = true
			}
		}
		if !freed {
			return err
		}
	}
}

// addPool and removePool track the pools take may trim.
func (b *budget) addPool(p *readPool) {
	b.mu.Lock()
	b.pools = append(slices.Clip(b.pools), p)
	b.mu.Unlock()
}

func (b *budget) removePool(p *readPool) {
	b.mu.Lock()
	b.pools = slices.DeleteFunc(slices.Clone(b.pools), func(q *readPool) bool { return q == p })
	b.mu.Unlock()
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

// refusedHandshake logs, once per transport, the first handshake (accepted
// or dialed) that failed for the budget: the budget and where it came from,
// what one connection costs, how many fit, and what to change. Later
// refusals are errors the caller sees; the operator needs the advice once.
// Other errors are not logged here.
func (b *budget) refusedHandshake(err error) {
	if !errors.Is(err, ErrMemoryBudget) || b.log == nil {
		return
	}
	b.once.Do(func() {
		advice := rdmadev.RaiseAdvice + "; or set Options.MemoryBudget"
		if b.cost.layout == ReceivePerConnection {
			advice = "with the shared receive queue (Options.Receive: ReceiveShared) a connection costs tens of KiB, not MiB; " + advice
		}
		b.log.Warn("registered-memory budget reached: connections are refused until some close",
			zap.String("budget", rdmadev.Bytes(b.limit)), zap.String("from", b.source),
			zap.String("in_use", rdmadev.Bytes(b.inUse())),
			zap.String("layout", b.cost.layout.name()),
			zap.String("per_connection", rdmadev.Bytes(b.cost.perConn)), zap.String("fixed", rdmadev.Bytes(b.cost.fixed)),
			zap.Int64("connections_fit", b.cost.fit(b.limit)),
			zap.String("advice", advice),
			zap.Error(err))
	})
}

// layoutCost is what a transport's receive layout registers, estimated
// from its Options: per connection, and once for all of them (the send
// arena's first chunk, the shared receive queue's room for lent credits).
// docs/rdma.md, "Memory budget", has the figures measured on a device.
type layoutCost struct {
	layout         ReceiveLayout
	perConn, fixed int64
}

// costOf estimates what o's layout registers (o with its defaults), the
// peer assumed to have the same BufferSize.
func costOf(o Options) layoutCost {
	buf := int64(o.BufferSize)
	c := layoutCost{layout: o.Receive}
	send := int64(o.SendSlots) * buf
	if o.PrivateSendSlots {
		c.perConn += send
	} else {
		c.fixed += send
	}
	if o.Receive == ReceiveShared {
		// A joined connection commits its guaranteed window and control
		// receives; the pool keeps room for lent credits, lendFloor
		// buffers or half a buffer per connection, whichever is more.
		c.perConn += int64(o.SharedCredits+credit.Extra)*buf + buf/2
		c.fixed += lendFloor * buf
	} else {
		c.perConn += int64(o.RecvBuffers+credit.Extra) * buf
	}
	return c
}

// fit is how many connections a budget of limit bytes holds (-1: no
// limit).
func (c layoutCost) fit(limit int64) int64 {
	if limit <= 0 {
		return -1
	}
	if c.perConn <= 0 || limit < c.fixed {
		return 0
	}
	return (limit - c.fixed) / c.perConn
}

// chooseReceive is the receive layout of Options whose Receive is zero
// (o.MemoryBudget already defaulted): DefaultReceive, unless the budget
// holds fewer than perConnectionMin connections of it, then ReceiveShared.
func chooseReceive(o Options) ReceiveLayout {
	if o.MemoryBudget <= 0 {
		return DefaultReceive
	}
	o.Receive = DefaultReceive
	if costOf(o.withSizes()).fit(o.MemoryBudget) < perConnectionMin {
		return ReceiveShared
	}
	return DefaultReceive
}

// name names the layout as Options' constants do.
func (l ReceiveLayout) name() string {
	switch l {
	case ReceivePerConnection:
		return "ReceivePerConnection"
	case ReceiveShared:
		return "ReceiveShared"
	}
	return fmt.Sprintf("ReceiveLayout(%d)", int(l))
}
