//go:build linux && cgo

package verbs

/*
#cgo noescape rr_post_send
#cgo nocallback rr_post_send
#cgo noescape rr_post_recv
#cgo nocallback rr_post_recv
#cgo noescape rr_query_qp_state
#cgo nocallback rr_query_qp_state
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// QP is a reliable-connected queue pair.
//
// Its state moves RESET → INIT (ToInit) → RTR (ToRTR) → RTS (ToRTS); ToError
// flushes everything posted. PostRecv is refused in RESET and PostSend before
// RTS (with an error wrapping ErrQPState), so misuse never reaches the
// provider. The state checked is the last one this process set; the device
// may move the QP to ERR on its own (a failed work request), which State
// reports.
type QP struct {
	pd       *PD
	sendCQ   *CQ
	recvCQ   *CQ
	srq      *SRQ // nil: the QP has its own receive queue
	qp       *C.struct_ibv_qp
	num      uint32
	inline   uint32
	port     atomic.Uint32 // set by ToInit, the default port of ToRTR
	maxSend  int
	maxRecv  int
	rdRead   bool          // QPConfig.RemoteRead
	setState atomic.Uint32 // QPState last set by a transition

	mu     sync.RWMutex // write-held by Close and transitions; read-held by posts
	closed bool
}

// CreateQP creates an RC queue pair in the RESET state. The QP does not
// signal every send (sq_sig_all is 0): SendWR.Signaled chooses.
func (p *PD) CreateQP(cfg QPConfig) (*QP, error) {
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, errors.New("rdma: create QP: SendCQ and RecvCQ are required")
	}
	if cfg.MaxSendWR <= 0 || (cfg.MaxRecvWR <= 0 && cfg.SRQ == nil) {
		return nil, fmt.Errorf("rdma: create QP: MaxSendWR (%d) and MaxRecvWR (%d) must be positive",
			cfg.MaxSendWR, cfg.MaxRecvWR)
	}
	if cfg.MaxSendSGE < 0 || cfg.MaxRecvSGE < 0 || cfg.MaxInlineData < 0 {
		return nil, errors.New("rdma: create QP: negative SGE or inline size")
	}
	if cfg.SendCQ.ctx != p.ctx || cfg.RecvCQ.ctx != p.ctx {
		return nil, errors.New("rdma: create QP: CQ belongs to another device context")
	}
	if cfg.SRQ != nil && cfg.SRQ.pd != p {
		return nil, errors.New("rdma: create QP: SRQ belongs to another PD")
	}
	if err := p.acquire(); err != nil {
		return nil, err
	}
	defer p.mu.RUnlock()
	if cfg.SRQ != nil {
		cfg.SRQ.mu.RLock()
		defer cfg.SRQ.mu.RUnlock()
		if cfg.SRQ.closed {
			return nil, fmt.Errorf("rdma: create QP: %w", errSRQClosed)
		}
	}
	// Hold the CQs open while the QP is created (read locks; once per CQ).
	cqs := []*CQ{cfg.SendCQ}
	if cfg.RecvCQ != cfg.SendCQ {
		cqs = append(cqs, cfg.RecvCQ)
	}
	for i, cq := range cqs {
		cq.mu.RLock()
		defer cq.mu.RUnlock()
		if cq.closed {
			return nil, fmt.Errorf("rdma: create QP: CQ %d: %w", i, ErrClosed)
		}
	}
	caps := C.struct_rr_qp_caps{
		max_send_wr:     C.uint32_t(cfg.MaxSendWR),
		max_recv_wr:     C.uint32_t(cfg.MaxRecvWR),
		max_send_sge:    C.uint32_t(max(cfg.MaxSendSGE, 1)),
		max_recv_sge:    C.uint32_t(max(cfg.MaxRecvSGE, 1)),
		max_inline_data: C.uint32_t(cfg.MaxInlineData),
	}
	var srq *C.struct_ibv_srq
	if cfg.SRQ != nil {
		srq = cfg.SRQ.srq
		caps.max_recv_wr = 0
		caps.max_recv_sge = 0
	}
	var num C.uint32_t
	qp, errno := C.rr_create_qp(p.pd, cfg.SendCQ.cq, cfg.RecvCQ.cq, srq, &caps, &num)
	if qp == nil {
		return nil, verbError(fmt.Sprintf("ibv_create_qp (send %d, recv %d, inline %d)",
			cfg.MaxSendWR, cfg.MaxRecvWR, cfg.MaxInlineData), errno)
	}
	p.children.Add(1)
	cfg.SendCQ.qps.Add(1)
	cfg.RecvCQ.qps.Add(1)
	if cfg.SRQ != nil {
		cfg.SRQ.qps.Add(1)
	}
	return &QP{
		pd:      p,
		sendCQ:  cfg.SendCQ,
		recvCQ:  cfg.RecvCQ,
		srq:     cfg.SRQ,
		qp:      qp,
		num:     uint32(num),
		inline:  uint32(caps.max_inline_data), // what the device granted
		maxSend: int(caps.max_send_wr),
		maxRecv: int(caps.max_recv_wr),
		rdRead:  cfg.RemoteRead,
	}, nil
}

// Num returns the QP number the peer must be told.
func (q *QP) Num() uint32 { return q.num }

// MaxInline returns the largest inline send the device granted (it may
// exceed QPConfig.MaxInlineData).
func (q *QP) MaxInline() int { return int(q.inline) }

// MaxSendWR and MaxRecvWR return the queue depths the device granted.
func (q *QP) MaxSendWR() int { return q.maxSend }

// MaxRecvWR returns the receive queue depth the device granted.
func (q *QP) MaxRecvWR() int { return q.maxRecv }

// State queries the device for the QP's current state.
func (q *QP) State() (QPState, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return QPUnknown, errQPClosed
	}
	var s C.uint32_t
	if rc, errno := C.rr_query_qp_state(q.qp, &s); rc != 0 {
		return QPUnknown, rcError("ibv_query_qp", int(rc), errno)
	}
	return QPState(s), nil
}

// modify runs one state transition, the call to C, under the write lock
// (no post runs during it) and records the new state.
func (q *QP) modify(to QPState, transition func(*C.struct_ibv_qp) (C.int, error)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errQPClosed
	}
	if rc, errno := transition(q.qp); rc != 0 {
		return rcError(fmt.Sprintf("ibv_modify_qp %d to %v", q.num, to), int(rc), errno)
	}
	q.setState.Store(uint32(to))
	return nil
}

// ToInit moves the QP from RESET to INIT on the given port. It grants no
// remote access (peers can only Send to it), or, with QPConfig.RemoteRead,
// RDMA Read of the MRs registered for it.
func (q *QP) ToInit(port uint8) error {
	if port == 0 {
		return errors.New("rdma: ToInit: port numbers start at 1")
	}
	err := q.modify(QPInit, func(qp *C.struct_ibv_qp) (C.int, error) {
		var rr C.int
		if q.rdRead {
			rr = 1
		}
		rc, errno := C.rr_qp_to_init(qp, C.uint8_t(port), rr)
		return rc, errno
	})
	if err != nil {
		return err
	}
	q.port.Store(uint32(port))
	return nil
}

// ToRTR moves the QP from INIT to RTR: it can receive from the peer
// described by a. Post the receives the peer may use before this.
func (q *QP) ToRTR(a RTRAttr) error {
	mtu, err := mtuToEnum(a.PathMTU)
	if err != nil {
		return err
	}
	if a.RQPSN >= 1<<24 || a.DestQPN >= 1<<24 {
		return fmt.Errorf("rdma: ToRTR: PSN %d or QPN %d exceeds 24 bits", a.RQPSN, a.DestQPN)
	}
	if a.MinRNRTimer > 31 {
		return fmt.Errorf("rdma: ToRTR: MinRNRTimer %d exceeds 31", a.MinRNRTimer)
	}
	port := a.Port
	if port == 0 {
		port = uint8(q.port.Load())
	}
	attr := C.struct_rr_rtr{
		path_mtu:      C.uint32_t(mtu),
		dest_qpn:      C.uint32_t(a.DestQPN),
		rq_psn:        C.uint32_t(a.RQPSN),
		dlid:          C.uint16_t(a.DLID),
		port:          C.uint8_t(port),
		min_rnr_timer: C.uint8_t(a.MinRNRTimer),
	}
	if q.rdRead {
		attr.max_dest_rd_atomic = 1
	}
	if !a.DGID.IsZero() {
		attr.global = 1
		attr.sgid_index = C.uint8_t(a.SGIDIndex)
		for i, b := range a.DGID {
			attr.dgid[i] = C.uint8_t(b)
		}
	}
	return q.modify(QPRTR, func(qp *C.struct_ibv_qp) (C.int, error) {
		rc, errno := C.rr_qp_to_rtr(qp, &attr)
		return rc, errno
	})
}

// ToRTS moves the QP from RTR to RTS: it can send. rnr_retry is set to 0
// (see RTSAttr).
func (q *QP) ToRTS(a RTSAttr) error {
	if a.SQPSN >= 1<<24 {
		return fmt.Errorf("rdma: ToRTS: PSN %d exceeds 24 bits", a.SQPSN)
	}
	if a.Timeout > 31 || a.RetryCount > 7 {
		return fmt.Errorf("rdma: ToRTS: Timeout %d (max 31) or RetryCount %d (max 7) out of range",
			a.Timeout, a.RetryCount)
	}
	attr := C.struct_rr_rts{
		sq_psn:    C.uint32_t(a.SQPSN),
		timeout:   C.uint8_t(a.Timeout),
		retry_cnt: C.uint8_t(a.RetryCount),
	}
	if q.rdRead {
		attr.max_rd_atomic = 1
	}
	// rr_qp_to_rts sets rnr_retry to 0: an RNR NAK fails the send at once.
	return q.modify(QPRTS, func(qp *C.struct_ibv_qp) (C.int, error) {
		rc, errno := C.rr_qp_to_rts(qp, &attr)
		return rc, errno
	})
}

// ToError moves the QP to ERR: outstanding and later work requests complete
// with IBV_WC_WR_FLUSH_ERR. Used for teardown: move to ERR, drain the
// flushed completions, then Close.
func (q *QP) ToError() error { return q.toState(QPError) }

// ToReset moves the QP back to RESET, discarding everything posted without
// completions, so that it can be brought up again.
func (q *QP) ToReset() error { return q.toState(QPReset) }

// toState moves the QP to a state that takes no attributes.
func (q *QP) toState(to QPState) error {
	return q.modify(to, func(qp *C.struct_ibv_qp) (C.int, error) {
		rc, errno := C.rr_qp_to_state(qp, C.uint32_t(to))
		return rc, errno
	})
}

// postBatch is the largest batch translated on the stack; bigger batches
// allocate their C-shaped copy.
const postBatch = 64

// mrSet holds the MRs a post has entered (see MR.g), run-length
// deduplicated: a batch usually names one or two MRs.
type mrSet struct {
	last  *MR
	n     int
	fixed [4]*MR
	extra []*MR
}

func (s *mrSet) enter(m *MR) bool {
	if m == s.last {
		return true
	}
	if !m.g.enter() {
		return false
	}
	if s.n < len(s.fixed) {
		s.fixed[s.n] = m
		s.n++
	} else {
		s.extra = append(s.extra, m)
	}
	s.last = m
	return true
}

func (s *mrSet) exit() {
	for _, m := range s.fixed[:s.n] {
		m.g.exit()
	}
	for _, m := range s.extra {
		m.g.exit()
	}
}

// resolve checks one work request's buffer and returns its address and lkey.
func resolve(m *MR, off, n uint32) (addr uint64, lkey uint32, err error) {
	if m == nil {
		if n != 0 {
			return 0, 0, errors.New("nil MR with non-zero length")
		}
		return 0, 0, nil
	}
	if uint64(off)+uint64(n) > uint64(len(m.buf)) {
		return 0, 0, fmt.Errorf("range [%d, %d) outside the %d-byte MR", off, uint64(off)+uint64(n), len(m.buf))
	}
	return m.addr + uint64(off), m.lkey, nil
}

// PostSend posts a batch of sends in one cgo call. Every request is checked
// first; nothing is posted if one is malformed. On failure the error is a
// *PostError saying which request failed and how many were posted.
func (q *QP) PostSend(wrs []SendWR) error {
	if len(wrs) == 0 {
		return nil
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return &PostError{Op: "ibv_post_send", Err: errQPClosed}
	}
	if st := QPState(q.setState.Load()); st < QPRTS {
		return &PostError{Op: "ibv_post_send", Err: fmt.Errorf("%w: QP %d is %v, sends need RTS", ErrQPState, q.num, st)}
	}
	var stack [postBatch]C.struct_rr_send_wr
	cw := stack[:0]
	if len(wrs) > postBatch {
		cw = make([]C.struct_rr_send_wr, 0, len(wrs))
	}
	var mrs mrSet
	defer mrs.exit()
	for i := range wrs {
		w := &wrs[i]
		if w.MR != nil && !mrs.enter(w.MR) {
			return &PostError{Op: "ibv_post_send", Index: i, Err: errMRClosed}
		}
		addr, lkey, err := resolve(w.MR, w.Offset, w.Length)
		if err != nil {
			return &PostError{Op: "ibv_post_send", Index: i, Err: err}
		}
		var flags C.uint32_t
		var mw *C.struct_ibv_mw
		var bindMR *C.struct_ibv_mr
		switch {
		case w.Bind != nil:
			if w.MR == nil || !w.MR.bindable || w.Length == 0 || w.Read || w.Invalidate || w.Inline || w.HasImm {
				return &PostError{Op: "ibv_post_send", Index: i,
					Err: errors.New("a window bind needs an MR made by RegisterForWindows, a length, and nothing else")}
			}
			flags |= C.RR_BIND | C.RR_NOSGE
			mw, bindMR = w.Bind.mw, w.MR.mr
		case w.Invalidate:
			if w.MR != nil || w.Read || w.Inline || w.HasImm {
				return &PostError{Op: "ibv_post_send", Index: i, Err: errors.New("an invalidation names a key only")}
			}
			flags |= C.RR_LOCAL_INV | C.RR_NOSGE
		}
		if w.Read {
			if !q.rdRead || w.MR == nil || w.Length == 0 || w.Inline || w.HasImm {
				return &PostError{Op: "ibv_post_send", Index: i,
					Err: errors.New("an RDMA Read needs a QP with RemoteRead, a local MR, a length, and no inline or immediate data")}
			}
			flags |= C.RR_READ
		}
		if w.Length == 0 {
			flags |= C.RR_NOSGE
		}
		var bindLen C.uint64_t
		remote := C.uint64_t(w.RemoteAddr)
		if w.Bind != nil {
			bindLen, remote = C.uint64_t(w.Length), C.uint64_t(addr)
		}
		if w.Signaled {
			flags |= C.RR_SIGNALED
		}
		if w.Inline {
			if w.Length > q.inline {
				return &PostError{Op: "ibv_post_send", Index: i,
					Err: fmt.Errorf("inline send of %d bytes exceeds the QP's max inline %d", w.Length, q.inline)}
			}
			flags |= C.RR_INLINE
		}
		if w.Solicited {
			flags |= C.RR_SOLICITED
		}
		if w.HasImm {
			flags |= C.RR_IMM
		}
		cw = append(cw, C.struct_rr_send_wr{
			id: C.uint64_t(w.ID), addr: C.uint64_t(addr), length: C.uint32_t(w.Length),
			lkey: C.uint32_t(lkey), imm: C.uint32_t(w.Imm), flags: flags,
			remote_addr: remote, rkey: C.uint32_t(w.RKey),
			bind_len: bindLen, mw: C.uintptr_t(uintptr(unsafe.Pointer(mw))), bind_mr: C.uintptr_t(uintptr(unsafe.Pointer(bindMR))),
		})
	}
	var bad C.int
	rc := C.rr_post_send(q.qp, &cw[0], C.int(len(cw)), &bad)
	posted := len(wrs)
	if rc != 0 {
		posted = int(bad)
	}
	for i := range wrs[:posted] {
		if w := wrs[i].Bind; w != nil {
			w.rkey.Store(wrs[i].RKey)
		}
	}
	if rc != 0 {
		return &PostError{Op: "ibv_post_send", Index: int(bad), Posted: int(bad), Err: postErrno(int(rc))}
	}
	return nil
}

// PostRecv posts a batch of receives in one cgo call, with the same
// checking and error reporting as PostSend. Receives may be posted from
// INIT on; post them before ToRTR so the peer's first Send finds one.
func (q *QP) PostRecv(wrs []RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return &PostError{Op: "ibv_post_recv", Err: errQPClosed}
	}
	if q.srq != nil {
		return &PostError{Op: "ibv_post_recv", Err: fmt.Errorf("QP %d takes its receives from an SRQ: post there", q.num)}
	}
	if st := QPState(q.setState.Load()); st == QPReset {
		return &PostError{Op: "ibv_post_recv", Err: fmt.Errorf("%w: QP %d is RESET, receives need INIT or later", ErrQPState, q.num)}
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
			return &PostError{Op: "ibv_post_recv", Index: i, Err: errMRClosed}
		}
		addr, lkey, err := resolve(w.MR, w.Offset, w.Length)
		if err != nil {
			return &PostError{Op: "ibv_post_recv", Index: i, Err: err}
		}
		cw = append(cw, C.struct_rr_recv_wr{
			id: C.uint64_t(w.ID), addr: C.uint64_t(addr), length: C.uint32_t(w.Length), lkey: C.uint32_t(lkey),
		})
	}
	var bad C.int
	if rc := C.rr_post_recv(q.qp, &cw[0], C.int(len(cw)), &bad); rc != 0 {
		return &PostError{Op: "ibv_post_recv", Index: int(bad), Posted: int(bad), Err: postErrno(int(rc))}
	}
	return nil
}

// postErrno turns ibv_post_*'s return value into an errno: an errno value
// by contract, though some providers return it negated.
func postErrno(rc int) syscall.Errno {
	if rc < 0 {
		rc = -rc
	}
	return syscall.Errno(rc)
}

// Close destroys the QP (its outstanding work requests are dropped without
// completions; for an orderly teardown move it to ERR and drain first).
// Close is idempotent.
func (q *QP) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	if rc, errno := C.rr_destroy_qp(q.qp); rc != 0 {
		return rcError("ibv_destroy_qp", int(rc), errno)
	}
	q.closed = true
	q.sendCQ.qps.Add(-1)
	q.recvCQ.qps.Add(-1)
	if q.srq != nil {
		q.srq.qps.Add(-1)
	}
	q.pd.children.Add(-1)
	return nil
}
