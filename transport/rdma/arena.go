package rdma

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// arena is registered send memory cut into slots of one size, from which
// sends take a slot when they are posted (or lent by NewSendBuffer) and to
// which their completion gives it back. By default one arena per device
// and slot size (the peers' buffer size) is shared by all the transport's
// connections on that device, so an idle connection holds no send memory;
// with Options.PrivateSendSlots each connection has one of its own, fixed
// at its SendSlots (the layout before the arena).
//
// A shared arena starts with one chunk of SendSlots slots, registered and
// charged to the budget by the first connection that needs it (a
// handshake is refused with ErrMemoryBudget when it does not fit), and
// grows by a chunk when a slot is wanted and none is free, while the
// budget allows; beyond that a send waits for a slot to come back, it is
// not refused. Chunks stay registered until the arena's last connection
// is gone. A connection takes at most SendSlots slots (its own count in
// sender.avail), so one busy connection cannot take them all.
//
// Senders waiting for a slot are woken one at a time, the longest waiting
// first, and a woken waiter that takes a slot, or gives up, passes the
// wake on while slots are free (lends never wait: arena.lend): one herd
// of a thousand waiters on every returned slot is what made
// TestRPC/ManyStreams slow before (notify.go). A sender that arrives
// while others wait may take a free slot before them: the wake hands out
// a chance, not a slot.
//
// Lock order: a connection's mu, then the arena's mu.
type arena struct {
	mu       sync.Mutex
	slot     int // bytes per slot
	perChunk int // slots per chunk
	// grow registers another chunk of n bytes; nil: the arena cannot
	// grow (a private one, or the test model).
	grow   func(n int) (*verbs.MR, []byte, error)
	chunks []*verbs.MR // nil entries in the model
	mem    [][]byte
	// tab is chunks and mem as of the last growth, for locate to read
	// without the lock (a new table per chunk, never changed after).
	tab   atomic.Pointer[chunkTable]
	free  []int32  // chunk*perChunk + index
	sendQ notifier // senders waiting for a free slot
	users int      // connections using a shared arena, under the transport's mu
}

// newArena returns an arena whose first chunk is mr/mem (perChunk slots of
// slot bytes); grow, when not nil, adds more.
func newArena(slot, perChunk int, mr *verbs.MR, mem []byte, grow func(n int) (*verbs.MR, []byte, error)) *arena {
	a := &arena{slot: slot, perChunk: perChunk, grow: grow}
	a.addLocked(mr, mem)
	return a
}

// addLocked adds a chunk. Called with mu held (or before sharing).
func (a *arena) addLocked(mr *verbs.MR, mem []byte) {
	base := int32(len(a.chunks) * a.perChunk)
	a.chunks = append(a.chunks, mr)
	a.mem = append(a.mem, mem)
	a.tab.Store(&chunkTable{mrs: slices.Clone(a.chunks), mem: slices.Clone(a.mem)})
	for i := int32(a.perChunk) - 1; i >= 0; i-- {
		a.free = append(a.free, base+i)
	}
}

// tryGrowLocked adds a chunk if the arena may grow and the budget allows;
// it reports whether it did. Called with mu held: registering takes a
// while, and meanwhile nobody else can take or give, but it happens once
// per chunk.
func (a *arena) tryGrowLocked() bool {
	if a.grow == nil {
		return false
	}
	mr, mem, err := a.grow(a.slot * a.perChunk)
	if err != nil {
		return false // over the budget, or the device says no: wait
	}
	a.addLocked(mr, mem)
	return true
}

// take takes a slot for a send that is about to be posted. It returns the
// slot and whether the take left no slot free (the send must then ask for
// a completion: see sender.signalLocked); or, when there is none, a
// channel woken when one may be free, on which the caller waits, then
// calls forget.
func (a *arena) take() (id int32, last bool, w chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	id, last, ok := a.takeLocked()
	if !ok {
		return -1, false, a.sendQ.wait()
	}
	return id, last, nil
}

// tryTake is take without the wait: ok is false, and nothing waits, when
// no slot is free and the arena may not grow (TrySend).
func (a *arena) tryTake() (id int32, last, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.takeLocked()
}

// takeLocked takes a free slot, growing the arena when none is; last: it
// was the last free one. Called with mu held.
func (a *arena) takeLocked() (id int32, last, ok bool) {
	if len(a.free) == 0 && !a.tryGrowLocked() {
		return -1, false, false
	}
	id = a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	a.handOffLocked()
	return id, len(a.free) == 0, true
}

// lend takes a slot for NewSendBuffer, which holds it without sending,
// and reports whether it could. It never takes the last free slot: a
// lend's slot comes back only once its holder sends it, which may be
// never, or only after sends that need a slot to post. Refused, the
// caller lends heap memory instead (copied into a slot when sent): a lend
// never waits for the arena, so memory pinned behind an abandoned
// unsignaled send on one connection cannot hold up another's lend.
func (a *arena) lend() (int32, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) < 2 && (!a.tryGrowLocked() || len(a.free) < 2) {
		return -1, false
	}
	id := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	a.handOffLocked()
	return id, true
}

// give returns slots and wakes a waiter.
func (a *arena) give(ids ...int32) {
	if len(ids) == 0 {
		return
	}
	a.mu.Lock()
	a.free = append(a.free, ids...)
	a.handOffLocked()
	a.mu.Unlock()
}

// handOffLocked wakes one waiter when a slot is free. Called with mu held
// wherever free grows, and after a take (another may be free).
func (a *arena) handOffLocked() {
	if len(a.free) > 0 {
		a.sendQ.signal()
	}
}

// forget ends a wait on a channel from take; with passOn (the waiter gave
// up) a wake it may have had goes to the next.
func (a *arena) forget(w chan struct{}, passOn bool) {
	a.mu.Lock()
	a.sendQ.forget(w)
	if passOn {
		a.handOffLocked()
	}
	a.mu.Unlock()
}

// chunkTable is what locate reads: the arena's chunks at one time.
type chunkTable struct {
	mrs []*verbs.MR
	mem [][]byte
}

// locate returns a slot's memory region, offset and bytes. It takes no
// lock: the caller holds the slot, so its chunk is in the table.
func (a *arena) locate(id int32) (*verbs.MR, uint32, []byte) {
	t := a.tab.Load()
	c, i := int(id)/a.perChunk, int(id)%a.perChunk
	off := i * a.slot
	return t.mrs[c], uint32(off), t.mem[c][off : off+a.slot]
}

// registered is how many bytes the arena holds registered.
func (a *arena) registered() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.chunks) * a.perChunk * a.slot
}

// close deregisters every chunk; nothing may use the arena any more.
func (a *arena) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	for _, mr := range a.chunks {
		if mr == nil {
			continue
		}
		if err := mr.Close(); err != nil && first == nil {
			first = err
		}
	}
	a.chunks, a.mem, a.free = nil, nil, nil
	return first
}

// sharedArena returns the device's arena for slots of size bytes, creating
// it, with its first chunk of perChunk slots, for the first connection
// that needs it. The transport's budget is charged for every chunk; the
// arena and its charge go when the device does (release).
func (t *Transport) sharedArena(d *device, size, perChunk int) (*arena, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := d.arenas[size]; a != nil {
		a.users++
		return a, nil
	}
	grow := func(n int) (*verbs.MR, []byte, error) {
		if err := t.budget.take(int64(n)); err != nil {
			return nil, nil, err
		}
		mr, err := d.pd.Register(n)
		if err != nil {
			t.budget.give(int64(n))
			return nil, nil, fmt.Errorf("registering a send arena chunk of %d bytes: %w", n, err)
		}
		return mr, mr.Bytes(), nil
	}
	mr, mem, err := grow(size * perChunk)
	if err != nil {
		return nil, err
	}
	a := newArena(size, perChunk, mr, mem, grow)
	a.users = 1
	if d.arenas == nil {
		d.arenas = make(map[int]*arena)
	}
	d.arenas[size] = a
	return a, nil
}

// leaveArena drops a connection's use of a shared arena; the last one
// frees it and gives its budget back, so a transport without connections
// (a listener waiting) holds no send memory.
func (t *Transport) leaveArena(d *device, a *arena) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.users--; a.users == 0 {
		t.closeArenaLocked(d, a)
	}
}

// closeArenaLocked frees an arena and its budget. Called with t.mu held.
func (t *Transport) closeArenaLocked(d *device, a *arena) {
	n := a.registered()
	if err := a.close(); err != nil {
		t.o.Logger.Error("deregistering a send arena", zap.Error(err))
	}
	t.budget.give(int64(n))
	if d.arenas[a.slot] == a {
		delete(d.arenas, a.slot)
	}
}

// closeArenasLocked frees what arenas a device still has (none, when every
// connection left its own). Called with t.mu held, when the device goes.
func (t *Transport) closeArenasLocked(d *device) {
	for _, a := range d.arenas {
		t.closeArenaLocked(d, a)
	}
}
