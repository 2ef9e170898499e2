//go:build linux && cgo

package verbs

/*
#cgo noescape rr_poll_cq
#cgo nocallback rr_poll_cq
#cgo noescape rr_get_cq_event
#cgo nocallback rr_get_cq_event
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// WorkCompletion is filled in by C as a struct rr_wc: the two must have the
// same size and field offsets. These fail to compile if they drift.
var (
	_ [unsafe.Sizeof(WorkCompletion{}) - unsafe.Sizeof(C.struct_rr_wc{})]struct{}
	_ [unsafe.Sizeof(C.struct_rr_wc{}) - unsafe.Sizeof(WorkCompletion{})]struct{}
	_ [unsafe.Offsetof(WorkCompletion{}.Status) - unsafe.Offsetof(C.struct_rr_wc{}.status)]struct{}
	_ [unsafe.Offsetof(C.struct_rr_wc{}.status) - unsafe.Offsetof(WorkCompletion{}.Status)]struct{}
	_ [unsafe.Offsetof(WorkCompletion{}.Imm) - unsafe.Offsetof(C.struct_rr_wc{}.imm)]struct{}
	_ [unsafe.Offsetof(C.struct_rr_wc{}.imm) - unsafe.Offsetof(WorkCompletion{}.Imm)]struct{}
	_ [unsafe.Offsetof(WorkCompletion{}.VendorErr) - unsafe.Offsetof(C.struct_rr_wc{}.vendor_err)]struct{}
	_ [unsafe.Offsetof(C.struct_rr_wc{}.vendor_err) - unsafe.Offsetof(WorkCompletion{}.VendorErr)]struct{}
	_ [unsafe.Offsetof(WorkCompletion{}.HasImm) - unsafe.Offsetof(C.struct_rr_wc{}.has_imm)]struct{}
	_ [unsafe.Offsetof(C.struct_rr_wc{}.has_imm) - unsafe.Offsetof(WorkCompletion{}.HasImm)]struct{}
)

// ackBatch is how many completion events Wait reads for a CQ before it
// acknowledges them in one ibv_ack_cq_events call (acking takes a mutex in
// libibverbs; the rest are acked when the CQ is closed).
const ackBatch = 64

// CompChannel is a completion channel: CQs created with it report "a
// completion arrived" events (once armed with ReqNotify) that Wait receives.
//
// Close stops Wait at once; the channel itself is destroyed when the last CQ
// using it is closed (immediately if there is none).
type CompChannel struct {
	ctx  *Context
	ch   *C.struct_ibv_comp_channel
	file *eventFile

	// evMu is held while an event is read and counted (Wait) and while a
	// CQ of this channel acknowledges its events and is destroyed (CQ.Close),
	// so the destroy never waits for an event that is read but not acked.
	evMu sync.Mutex

	// What the event read of the Wait holding the file's turn found, and
	// tryRead, the read it retries, built once so Wait allocates nothing.
	evCQ    *CQ
	evErr   error
	tryRead func() bool

	mu         sync.RWMutex // write-held by Close and destroy; read-held while creating CQs
	closed     bool         // Close was called: Wait and CreateCQ fail
	fileClosed bool         // the file is closed: no event read is in flight
	destroyed  bool         // ibv_destroy_comp_channel done
	cqs        atomic.Int64 // open CQs using this channel
}

// NewCompChannel creates a completion channel.
func (c *Context) NewCompChannel() (*CompChannel, error) {
	if err := c.acquire(); err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	var fd C.int
	ch, errno := C.rr_create_comp_channel(c.ctx, &fd)
	if ch == nil {
		return nil, verbError("ibv_create_comp_channel", errno)
	}
	f, err := newEventFile(fd, c.name+" completion channel")
	if err != nil {
		C.rr_destroy_comp_channel(ch)
		return nil, err
	}
	c.children.Add(1)
	cc := &CompChannel{ctx: c, ch: ch, file: f}
	cc.tryRead = func() bool {
		cc.evCQ, cc.evErr = cc.readEvent()
		return !errors.Is(cc.evErr, syscall.EAGAIN)
	}
	return cc, nil
}

// Wait waits for the next completion event and returns the CQ it is for.
// It blocks no OS thread (the fd is waited on through Go's netpoller).
//
// An event means "this CQ got a completion since it was armed": poll the CQ
// empty, re-arm it with ReqNotify, and poll once more before waiting again,
// or a completion that arrived in between is missed.
//
// One goroutine should own a channel: concurrent calls are served one at a
// time. Wait returns ctx's error when ctx is done, and an error wrapping
// ErrClosed once the channel is closed (including a Wait already blocked).
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	ch.mu.RLock()
	closed := ch.closed
	ch.mu.RUnlock()
	if closed {
		return nil, closedError("completion channel")
	}
	if err := ch.file.takeTurn(ctx); err != nil {
		return nil, err
	}
	defer ch.file.endTurn()
	ch.evCQ, ch.evErr = nil, nil
	if err := ch.file.waitTurn(ctx, ch.tryRead); err != nil {
		return nil, err
	}
	cq, err := ch.evCQ, ch.evErr
	ch.evCQ, ch.evErr = nil, nil
	return cq, err
}

// Wake makes the Wait in progress, or else the next one, return ErrWoken,
// once. A goroutine that waits with context.Background (which costs no
// allocation per wait, unlike a cancellable context) is stopped with it.
func (ch *CompChannel) Wake() { ch.file.wake() }

// readEvent reads one event if there is one (else an error wrapping
// EAGAIN) and counts it for acknowledgement.
func (ch *CompChannel) readEvent() (*CQ, error) {
	ch.evMu.Lock()
	defer ch.evMu.Unlock()
	var h C.uintptr_t
	if rc, errno := C.rr_get_cq_event(ch.ch, &h); rc != 0 {
		if errno == syscall.EAGAIN {
			return nil, syscall.EAGAIN
		}
		return nil, verbError("ibv_get_cq_event", errno)
	}
	// The CQ cannot have been destroyed: CQ.Close destroys under evMu,
	// which also discards the CQ's unread events.
	cq := cgo.Handle(h).Value().(*CQ)
	cq.unacked++
	if cq.unacked >= ackBatch {
		C.rr_ack_cq_events(cq.cq, C.uint(cq.unacked))
		cq.unacked = 0
	}
	return cq, nil
}

// Close makes Wait and CreateCQ fail with ErrClosed and wakes a blocked
// Wait. The channel is destroyed now if no CQ uses it, else when the last
// such CQ is closed. Close is idempotent.
func (ch *CompChannel) Close() error {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return nil
	}
	ch.closed = true
	ch.mu.Unlock()
	// Outside mu: closing the file waits for an event read in flight, and
	// readEvent takes evMu, which CQ.Close holds while it takes ch.mu.
	ch.file.close()
	ch.mu.Lock()
	ch.fileClosed = true
	ch.mu.Unlock()
	return ch.maybeDestroy()
}

// maybeDestroy destroys the channel once it is closed and unused.
func (ch *CompChannel) maybeDestroy() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.fileClosed || ch.destroyed || ch.cqs.Load() > 0 {
		return nil
	}
	ch.destroyed = true
	ch.ctx.children.Add(-1)
	if rc, errno := C.rr_destroy_comp_channel(ch.ch); rc != 0 {
		return rcError("ibv_destroy_comp_channel", int(rc), errno)
	}
	return nil
}

// CQ is a completion queue. It owns nothing, but QPs use it: close them
// first.
type CQ struct {
	ctx    *Context
	ch     *CompChannel // nil without a completion channel
	cq     *C.struct_ibv_cq
	handle cgo.Handle // the CQ's context in C: maps events back to this CQ
	size   int
	// unacked counts events read by Wait and not yet acknowledged; guarded
	// by ch.evMu.
	unacked uint32

	mu     sync.RWMutex // write-held by Close; read-held by Poll, ReqNotify and QP creation
	closed bool
	qps    atomic.Int64 // QPs using this CQ (a QP using it for both queues counts twice)
}

// CreateCQ creates a CQ with room for at least cqe completions. With a
// completion channel (ch may be nil) the CQ can be armed with ReqNotify and
// waited on with ch.Wait.
func (c *Context) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe <= 0 {
		return nil, fmt.Errorf("rdma: create CQ: size %d must be positive", cqe)
	}
	if err := c.acquire(); err != nil {
		return nil, err
	}
	defer c.mu.RUnlock()
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		if ch.ctx != c {
			return nil, errors.New("rdma: create CQ: completion channel belongs to another device context")
		}
		ch.mu.RLock()
		defer ch.mu.RUnlock()
		if ch.closed {
			return nil, closedError("completion channel")
		}
		cch = ch.ch
	}
	cq := &CQ{ctx: c, ch: ch}
	cq.handle = cgo.NewHandle(cq)
	var size C.int
	ccq, errno := C.rr_create_cq(c.ctx, C.int(cqe), C.uintptr_t(cq.handle), cch, &size)
	if ccq == nil {
		cq.handle.Delete()
		return nil, verbError(fmt.Sprintf("ibv_create_cq (%d entries)", cqe), errno)
	}
	cq.cq = ccq
	cq.size = int(size)
	c.children.Add(1)
	if ch != nil {
		ch.cqs.Add(1)
	}
	return cq, nil
}

// Size returns the number of entries the device gave the CQ (at least what
// was asked).
func (cq *CQ) Size() int { return cq.size }

// Poll moves up to len(wcs) completions into wcs, in one cgo call, and
// returns how many. It does not block: 0 means the CQ is empty. Failed work
// requests are completions too: check each one's Status (or Err).
func (cq *CQ) Poll(wcs []WorkCompletion) (int, error) {
	if len(wcs) == 0 {
		return 0, nil
	}
	cq.mu.RLock()
	if cq.closed {
		cq.mu.RUnlock()
		return 0, errCQClosed
	}
	n := C.rr_poll_cq(cq.cq, (*C.struct_rr_wc)(unsafe.Pointer(&wcs[0])), C.int(len(wcs)))
	cq.mu.RUnlock()
	if n < 0 {
		return 0, fmt.Errorf("rdma: ibv_poll_cq failed (%d)", int(n))
	}
	return int(n), nil
}

// ReqNotify arms the CQ: the next completion (or, with solicitedOnly, the
// next solicited or failed one) raises one event on its completion channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.RLock()
	defer cq.mu.RUnlock()
	if cq.closed {
		return errCQClosed
	}
	if cq.ch == nil {
		return errors.New("rdma: ReqNotify on a CQ without a completion channel")
	}
	so := C.int(0)
	if solicitedOnly {
		so = 1
	}
	if rc, errno := C.rr_req_notify_cq(cq.cq, so); rc != 0 {
		return rcError("ibv_req_notify_cq", int(rc), errno)
	}
	return nil
}

// Close acknowledges the CQ's outstanding events and destroys it. It fails
// with an error wrapping syscall.EBUSY, leaving the CQ open, while a QP uses
// it. Close is idempotent.
func (cq *CQ) Close() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return nil
	}
	if n := cq.qps.Load(); n > 0 {
		return busyError("CQ", n, "the QPs using it")
	}
	if err := cq.destroy(); err != nil {
		return err
	}
	cq.closed = true
	cq.handle.Delete()
	cq.ctx.children.Add(-1)
	if cq.ch != nil {
		cq.ch.cqs.Add(-1)
		return cq.ch.maybeDestroy()
	}
	return nil
}

func (cq *CQ) destroy() error {
	if cq.ch != nil {
		// ibv_destroy_cq waits until every event read for this CQ is acked.
		cq.ch.evMu.Lock()
		defer cq.ch.evMu.Unlock()
		if cq.unacked > 0 {
			C.rr_ack_cq_events(cq.cq, C.uint(cq.unacked))
			cq.unacked = 0
		}
	}
	if rc, errno := C.rr_destroy_cq(cq.cq); rc != 0 {
		return rcError("ibv_destroy_cq", int(rc), errno)
	}
	return nil
}
