package rdma

import (
	"errors"
	"syscall"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// Windowed rendezvous regions (docs/rdma.md, "Rendezvous: keys"). Where the
// device has type 2 memory windows, a sender's region is not registered
// for its transfer: it is a buffer of the device's pool (registered once,
// local-only, with IBV_ACCESS_MW_BIND), and the connection's one window
// is bound to the message's bytes by a work request posted just before
// the descriptor (the descriptor carries the window's new key). When the
// peer's reply comes, the completion handler posts the window's local
// invalidation; the buffer goes back to the pool only once that
// invalidation completed and the sender is done with the bytes (a refused
// message is sent in fragments from them). A key therefore reads exactly
// the message's bytes, only through this connection's queue pair (a type
// 2 window is bound to one), from the bind until the invalidation that
// follows the reply — or until the queue pair leaves RTS (a peer's reads
// need it) and the window is deallocated with the connection.

// rendezvousWindows turns the windowed regions on (the default: in the
// test bed's guest they beat a region registered per transfer, docs/rdma.md
// "Rendezvous: registration"). The package's tests turn them off with
// -rdma.windows=false, for the path a device without type 2 windows takes.
var rendezvousWindows = true

// noInval is the seq of a winRegion whose invalidation was never posted.
const noInval = ^uint64(0)

// winRegion is a windowed region whose key was handed out and whose
// invalidation is queued.
type winRegion struct {
	mr       *verbs.MR
	seq      uint64 // its invalidation's work request
	invalid  bool   // the invalidation completed
	released bool   // the sender is done with its bytes
}

// windowedRegion takes a region of n bytes for a rendezvous from the
// device's windowed pool; nil when the device has no memory windows (the
// caller registers one per transfer) or no memory (budget: fallback is
// true, the message goes in fragments).
func (c *conn) windowedRegion(n int) (mr *verbs.MR, fallback bool) {
	if !rendezvousWindows || c.dev.noWindows.Load() || !c.haveWindow() {
		return nil, false
	}
	if mr := c.dev.wins.get(n); mr != nil {
		return mr, false
	}
	mr, err := c.dev.wins.take(n)
	if errors.Is(err, ErrMemoryBudget) {
		return nil, true
	}
	if err != nil {
		c.log.Debug("registering a windowed rendezvous region: registering per transfer", zap.Error(err))
		return nil, false
	}
	return mr, false
}

// haveWindow allocates the connection's memory window once; false when
// the device has none (it is marked so, and rendezvous regions on it are
// registered per transfer).
func (c *conn) haveWindow() bool {
	c.mu.Lock()
	ok := c.sender.rndv.mw != nil
	gone := c.memFreed || c.closeSig.IsSet()
	c.mu.Unlock()
	if ok {
		return true
	}
	if gone {
		return false
	}
	mw, err := c.dev.pd.AllocMW()
	if err != nil {
		if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			c.dev.noWindows.Store(true)
		}
		c.log.Debug("no memory window: rendezvous regions registered per transfer", zap.Error(err))
		return false
	}
	c.mu.Lock()
	if c.sender.rndv.mw != nil || c.memFreed {
		ok := c.sender.rndv.mw != nil
		c.mu.Unlock()
		c.closeWindow(mw)
		return ok
	}
	c.sender.rndv.mw, c.sender.rndv.key = mw, mw.RKey()
	c.mu.Unlock()
	return true
}

func (c *conn) closeWindow(mw *verbs.MW) {
	if err := mw.Close(); err != nil {
		c.log.Error("deallocating a memory window", zap.Error(err))
	}
}

// queueBind queues the bind of the connection's window to the first n
// bytes of mr and returns the key it will have. The descriptor posted
// after it carries the key: the send queue executes the bind first.
func (s *sender) queueBind(mr *verbs.MR, n int) (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeSig.IsSet() {
		return 0, s.closeSig.Err()
	}
	if s.rndv.rsvFree == 0 {
		return 0, protoErr("a window bind with no reserved send-queue entry free")
	}
	s.rndv.rsvFree--
	s.rndv.key = verbs.NextRKey(s.rndv.key)
	wr := verbs.SendWR{ID: s.seq, Bind: s.rndv.mw, MR: mr, Length: uint32(n), RKey: s.rndv.key, Signaled: true}
	s.unsignaled = 0
	s.outbox = append(s.outbox, wr)
	s.ring = append(s.ring, posted{seq: wr.ID, slot: -1, signaled: true, reserved: true})
	s.seq++
	return s.rndv.key, nil
}

// queueInvalidateLocked queues the invalidation of the window's key, now
// bound to mr, whose rendezvous the peer replied to. Called with mu held;
// the caller flushes.
func (s *sender) queueInvalidateLocked(mr *verbs.MR) error {
	if s.closeSig.IsSet() {
		// Nothing more is posted: the key dies with the queue pair and
		// the window (freeWindows), which then puts mr back; until
		// then the queue pair may still be in RTS.
		s.rndv.wins = append(s.rndv.wins, winRegion{mr: mr, seq: noInval})
		return nil
	}
	if s.rndv.rsvFree == 0 {
		return protoErr("a window invalidation with no reserved send-queue entry free")
	}
	s.rndv.rsvFree--
	wr := verbs.SendWR{ID: s.seq, Invalidate: true, RKey: s.rndv.key, Signaled: true}
	s.unsignaled = 0
	s.outbox = append(s.outbox, wr)
	s.ring = append(s.ring, posted{seq: wr.ID, slot: -1, signaled: true, reserved: true, inval: true})
	s.seq++
	s.rndv.wins = append(s.rndv.wins, winRegion{mr: mr, seq: wr.ID})
	return nil
}

// invalidatedLocked: the invalidation seq completed; its region goes back
// to the pool (putInvalidated) if the sender is done with it. Called with
// mu held, from completedLocked.
func (s *sender) invalidatedLocked(seq uint64) {
	for i := range s.rndv.wins {
		w := &s.rndv.wins[i]
		if w.seq != seq {
			continue
		}
		if w.released {
			s.rndv.toPut = append(s.rndv.toPut, w.mr)
			s.rndv.wins = append(s.rndv.wins[:i], s.rndv.wins[i+1:]...)
		} else {
			w.invalid = true
		}
		return
	}
}

// releaseWindowed: the sender is done with the bytes of mr; it reports
// whether mr may go back to the pool now (its key was never handed out,
// or its invalidation completed), else the invalidation's completion
// puts it back.
func (s *sender) releaseWindowed(mr *verbs.MR) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.rndv.wins {
		w := &s.rndv.wins[i]
		if w.mr != mr {
			continue
		}
		if !w.invalid {
			w.released = true
			return false
		}
		s.rndv.wins = append(s.rndv.wins[:i], s.rndv.wins[i+1:]...)
		return true
	}
	return true
}

// putInvalidated gives the pool the regions whose invalidation completed
// (called by the completion handler after sendCompleted). A region the
// pool has no room for is deregistered on a goroutine of its own, not on
// the handler.
func (c *conn) putInvalidated() {
	c.mu.Lock()
	put := c.sender.rndv.toPut
	c.sender.rndv.toPut = nil
	c.mu.Unlock()
	for _, mr := range put {
		c.putRegionAsync(mr)
	}
}

// putRegionAsync puts mr back in the windowed pool, or deregisters it on a
// goroutine (holding a lent count, so the connection's memory and device
// wait for it).
func (c *conn) putRegionAsync(mr *verbs.MR) {
	if c.dev.wins.keep(mr) {
		return
	}
	c.lentBufs.Add(1)
	go func() {
		defer c.unlend()
		c.dev.wins.free(mr)
	}()
}

// freeWindows frees the window and the windowed regions the connection
// still holds, once its queue pair is gone (the window's key is dead with
// it; deallocating the window kills it for good). Regions the sender still
// uses are left to it (releaseWindowed finds them gone and puts them
// back). skip is a region already freed.
func (c *conn) freeWindows(skip *verbs.MR) {
	c.mu.Lock()
	mw := c.sender.rndv.mw
	c.sender.rndv.mw = nil
	var put []*verbs.MR
	for _, w := range c.sender.rndv.wins {
		if w.released && w.mr != skip {
			put = append(put, w.mr)
		}
	}
	put = append(put, c.sender.rndv.toPut...)
	c.sender.rndv.wins, c.sender.rndv.toPut = nil, nil
	c.mu.Unlock()
	if mw != nil {
		c.closeWindow(mw)
	}
	for _, mr := range put {
		c.dev.wins.put(mr)
	}
}

// dropWindow deallocates the connection's window once its queue pair is in
// ERR and drained, before the queue pair is destroyed: a type 2 window
// bound to a queue pair holds a reference to it in rxe.
func (c *conn) dropWindow() {
	c.mu.Lock()
	mw := c.sender.rndv.mw
	c.sender.rndv.mw = nil
	c.mu.Unlock()
	if mw != nil {
		c.closeWindow(mw)
	}
}
