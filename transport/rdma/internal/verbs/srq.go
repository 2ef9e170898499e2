//go:build linux && cgo

package verbs

/*
#cgo noescape rr_post_srq_recv
#cgo nocallback rr_post_srq_recv
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// SRQ is a shared receive queue: the receives of every QP created with it
// (QPConfig.SRQ) are taken from it, whichever QP a message arrives on. Each
// completion still goes to the receiving QP's receive CQ and names that QP
// (WorkCompletion.QPNum).
type SRQ struct {
	pd    *PD
	srq   *C.struct_ibv_srq
	maxWR int

	mu     sync.RWMutex // write-held by Close; read-held by posts and QP creation
	closed bool
	qps    atomic.Int64 // open QPs attached to it
}

// CreateSRQ creates a shared receive queue of at least maxWR receives.
func (p *PD) CreateSRQ(maxWR int) (*SRQ, error) {
	if maxWR <= 0 {
		return nil, fmt.Errorf("rdma: create SRQ: maxWR (%d) must be positive", maxWR)
	}
	if err := p.acquire(); err != nil {
		return nil, err
	}
	defer p.mu.RUnlock()
	var granted C.uint32_t
	srq, errno := C.rr_create_srq(p.pd, C.uint32_t(maxWR), &granted)
	if srq == nil {
		return nil, verbError(fmt.Sprintf("ibv_create_srq (%d receives)", maxWR), errno)
	}
	p.children.Add(1)
	// ibv_create_srq writes back what it granted.
	return &SRQ{pd: p, srq: srq, maxWR: int(granted)}, nil
}

// MaxWR returns the number of receives the device granted.
func (s *SRQ) MaxWR() int { return s.maxWR }

// PostRecv posts a batch of receives to the SRQ in one cgo call, checked
// and reported as QP.PostRecv does.
func (s *SRQ) PostRecv(wrs []RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return &PostError{Op: "ibv_post_srq_recv", Err: errSRQClosed}
	}
	var stack [postBatch]C.struct_rr_recv_wr
	cw := stack[:0]
	if len(wrs) > postBatch {
		cw = make([]C.struct_rr_recv_wr, 0, len(wrs))
	}
	var mrs mrSet
	defer mrs.exit()
	for i := range wrs {
		w := &wrs[i]
		if w.MR != nil && !mrs.enter(w.MR) {
			return &PostError{Op: "ibv_post_srq_recv", Index: i, Err: errMRClosed}
		}
		addr, lkey, err := resolve(w.MR, w.Offset, w.Length)
		if err != nil {
			return &PostError{Op: "ibv_post_srq_recv", Index: i, Err: err}
		}
		cw = append(cw, C.struct_rr_recv_wr{
			id: C.uint64_t(w.ID), addr: C.uint64_t(addr), length: C.uint32_t(w.Length), lkey: C.uint32_t(lkey),
		})
	}
	var bad C.int
	if rc := C.rr_post_srq_recv(s.srq, &cw[0], C.int(len(cw)), &bad); rc != 0 {
		return &PostError{Op: "ibv_post_srq_recv", Index: int(bad), Posted: int(bad), Err: postErrno(int(rc))}
	}
	return nil
}

// Arm sets the SRQ's limit: once fewer than limit receives are posted, the
// device raises one EventSRQLimitReached (Context.AsyncEvent) and disarms;
// arm it again to hear of the next time. Zero disarms it.
func (s *SRQ) Arm(limit int) error {
	if limit < 0 || limit >= s.maxWR {
		return fmt.Errorf("rdma: arm SRQ: limit %d outside 0..%d", limit, s.maxWR-1)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errSRQClosed
	}
	if rc, errno := C.rr_arm_srq(s.srq, C.uint32_t(limit)); rc != 0 {
		return rcError("ibv_modify_srq", int(rc), errno)
	}
	return nil
}

// Close destroys the SRQ. It fails with an error wrapping syscall.EBUSY,
// leaving the SRQ open, while QPs attached to it are open. Receives still
// posted are dropped. Close is idempotent.
func (s *SRQ) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if n := s.qps.Load(); n > 0 {
		return busyError("SRQ", n, "its QPs")
	}
	if rc, errno := C.rr_destroy_srq(s.srq); rc != 0 {
		return rcError("ibv_destroy_srq", int(rc), errno)
	}
	s.closed = true
	s.pd.children.Add(-1)
	return nil
}
