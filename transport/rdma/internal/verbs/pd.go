//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// PD is a protection domain. It owns the MRs and QPs created from it, which
// must be closed before it.
type PD struct {
	ctx *Context
	pd  *C.struct_ibv_pd

	mu       sync.RWMutex // write-held by Close; read-held while creating children
	closed   bool
	children atomic.Int64 // open MRs and QPs
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if err := c.acquire(); err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	pd, errno := C.rr_alloc_pd(c.ctx)
	if pd == nil {
		return nil, verbError("ibv_alloc_pd", errno)
	}
	c.children.Add(1)
	return &PD{ctx: c, pd: pd}, nil
}

func (p *PD) acquire() error {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return closedError("PD")
	}
	return nil
}

// Close deallocates the PD. It fails with an error wrapping syscall.EBUSY,
// leaving the PD open, while MRs or QPs created from it are open. Close is
// idempotent.
func (p *PD) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if n := p.children.Load(); n > 0 {
		return busyError("PD", n, "its MRs and QPs")
	}
	if rc, errno := C.rr_dealloc_pd(p.pd); rc != 0 {
		return rcError("ibv_dealloc_pd", int(rc), errno)
	}
	p.closed = true
	p.ctx.children.Add(-1)
	return nil
}

// MR is registered memory: a page-aligned mapping outside the Go heap,
// registered for local access only (the device may write received data into
// it; peers get no remote access), unless made by RegisterRemoteRead. Its bytes stay put, so the device and Go
// can share them.
type MR struct {
	pd   *PD
	mr   *C.struct_ibv_mr
	mem  []byte // the whole mapping (whole pages)
	buf  []byte // mem[:size], what Bytes returns
	addr uint64
	lkey uint32
	rkey uint32
	// remote: registered with IBV_ACCESS_REMOTE_READ (RegisterRemoteRead)
	remote bool
	// bindable: registered with IBV_ACCESS_MW_BIND (RegisterForWindows)
	bindable bool

	// g is entered by every post that names this MR, so Close cannot unmap
	// memory an inline send is being copied from. A guard rather than a
	// read lock because one post may name the same MR many times.
	g       guard
	closeMu sync.Mutex
	closed  bool
	err     error // what the first Close returned
}

var pageSize = os.Getpagesize()

// Register maps size bytes of fresh zeroed memory (rounded up to whole pages
// for the mapping) and registers them with IBV_ACCESS_LOCAL_WRITE.
//
// Registration pins the pages: it counts against RLIMIT_MEMLOCK.
func (p *PD) Register(size int) (*MR, error) { return p.register(size, C.RR_MR_LOCAL) }

// RegisterRemoteRead is Register with IBV_ACCESS_REMOTE_READ as well: a
// peer whose QP was created with QPConfig.RemoteRead and that holds RKey may
// RDMA Read the region (never write it) until Close deregisters it, which
// invalidates the key. Meant for one transfer at a time: register, hand out
// Addr and RKey, Close once the peer said it read it.
func (p *PD) RegisterRemoteRead(size int) (*MR, error) { return p.register(size, C.RR_MR_REMOTE_READ) }

// RegisterForWindows is Register with IBV_ACCESS_MW_BIND as well: memory
// windows (AllocMW) may be bound to ranges of it (SendWR.Bind), each
// readable by one peer under the window's key until it is invalidated. The
// MR's own key grants no remote access (RKey is 0).
func (p *PD) RegisterForWindows(size int) (*MR, error) { return p.register(size, C.RR_MR_BIND) }

func (p *PD) register(size int, how C.int) (*MR, error) {
	if size <= 0 {
		return nil, fmt.Errorf("rdma: register %d bytes: size must be positive", size)
	}
	if err := p.acquire(); err != nil {
		return nil, err
	}
	defer p.mu.RUnlock()
	mapped := (size + pageSize - 1) &^ (pageSize - 1)
	mem, err := syscall.Mmap(-1, 0, mapped, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("rdma: mmap %d bytes for an MR: %w", mapped, err)
	}
	// mem is not Go heap memory, so C may keep this pointer.
	var lkey, rkey C.uint32_t
	mr, errno := C.rr_reg_mr(p.pd, unsafe.Pointer(&mem[0]), C.size_t(size), how, &lkey, &rkey)
	if mr == nil {
		syscall.Munmap(mem)
		err := verbError(fmt.Sprintf("ibv_reg_mr (%d bytes)", size), errno)
		if errno == syscall.ENOMEM || errno == syscall.EPERM {
			err = fmt.Errorf("%w (is RLIMIT_MEMLOCK too low? see ulimit -l)", err)
		}
		return nil, err
	}
	p.children.Add(1)
	return &MR{
		pd:       p,
		mr:       mr,
		mem:      mem,
		buf:      mem[:size:size],
		addr:     uint64(uintptr(unsafe.Pointer(&mem[0]))),
		lkey:     uint32(lkey),
		rkey:     uint32(rkey),
		remote:   how == C.RR_MR_REMOTE_READ,
		bindable: how == C.RR_MR_BIND,
		g:        newGuard(),
	}, nil
}

// Bytes returns the registered memory, or nil once Close has begun. The
// slice must not be used after Close: the memory is unmapped, and touching
// it then faults.
func (m *MR) Bytes() []byte {
	if m.g.isShut() {
		return nil
	}
	return m.buf
}

// Len returns the registered size in bytes.
func (m *MR) Len() int { return len(m.buf) }

// LKey returns the local key work requests use to name this memory.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the key a peer names this memory with in an RDMA Read, and
// Addr its address; both meaningful only for RegisterRemoteRead's MRs
// (RKey is 0 for the others: they grant no remote access).
func (m *MR) RKey() uint32 {
	if !m.remote {
		return 0
	}
	return m.rkey
}

// Windowed reports whether memory windows may be bound to the MR
// (RegisterForWindows).
func (m *MR) Windowed() bool { return m.bindable }

// Addr returns the address of the registered memory, as a peer names it.
func (m *MR) Addr() uint64 { return m.addr }

// Close deregisters the memory, then unmaps it. It waits for posts naming
// the MR that are in flight; later posts fail with ErrClosed. Work requests
// already posted that still reference the MR complete with an error
// (IBV_WC_LOC_PROT_ERR or similar) instead of touching freed memory. Close is
// idempotent.
//
// If deregistration fails the memory is left mapped (the device may still
// use it) and the MR stays counted against its PD.
func (m *MR) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return m.err
	}
	m.closed = true
	m.g.shut()
	if rc, errno := C.rr_dereg_mr(m.mr); rc != 0 {
		m.err = rcError("ibv_dereg_mr", int(rc), errno)
		return m.err
	}
	if err := syscall.Munmap(m.mem); err != nil {
		m.err = fmt.Errorf("rdma: munmap MR: %w", err)
	}
	m.pd.children.Add(-1)
	return m.err
}

// MW is a type 2 memory window: a key a peer may RDMA Read with, valid for
// exactly the range of an MR (RegisterForWindows) it was last bound to,
// only on the QP that bound it, from the bind (SendWR.Bind) until the
// invalidation (SendWR.Invalidate) — which the sender posts, so a key's
// lifetime is in its hands, not the peer's. Binding and invalidating are
// work requests on the QP: no system call, no registration.
type MW struct {
	pd   *PD
	mw   *C.struct_ibv_mw
	rkey atomic.Uint32 // the key of the last bind posted (or the initial one)

	mu     sync.Mutex
	closed bool
}

// AllocMW allocates a type 2 memory window, bound to nothing. It fails
// with an error wrapping syscall.EOPNOTSUPP when the device has none.
func (p *PD) AllocMW() (*MW, error) {
	if err := p.acquire(); err != nil {
		return nil, err
	}
	defer p.mu.RUnlock()
	var rkey C.uint32_t
	mw, errno := C.rr_alloc_mw(p.pd, &rkey)
	if mw == nil {
		return nil, verbError("ibv_alloc_mw (type 2)", errno)
	}
	p.children.Add(1)
	w := &MW{pd: p, mw: mw}
	w.rkey.Store(uint32(rkey))
	return w, nil
}

// RKey is the key of the window's last bind posted.
func (w *MW) RKey() uint32 { return w.rkey.Load() }

// NextRKey is the key to bind the window with next: its key with the low
// 8 bits (the part the consumer chooses) one more, so a key handed out
// before the last invalidation never names the window again until 256
// binds later.
func (w *MW) NextRKey() uint32 { return NextRKey(w.rkey.Load()) }

// NextRKey is the key after k for a type 2 window: the low 8 bits one
// more (ibv_inc_rkey).
func NextRKey(k uint32) uint32 { return k&^0xff | (k+1)&0xff }

// Close deallocates the window (its key dies with it). Idempotent.
func (w *MW) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	if rc, errno := C.rr_dealloc_mw(w.mw); rc != 0 {
		return rcError("ibv_dealloc_mw", int(rc), errno)
	}
	w.closed = true
	w.pd.children.Add(-1)
	return nil
}
