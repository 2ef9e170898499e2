//go:build !linux || !cgo

package verbs

// This file gives builds without RDMA (not Linux, or CGO_ENABLED=0) the same
// API as the real binding. Every constructor fails with an error wrapping
// ErrNotSupported, so no object ever exists and the methods below are never
// reached; they exist so that code using the package compiles everywhere.

import (
	"context"
	"fmt"
)

func notSupported(what string) error { return fmt.Errorf("rdma: %s: %w", what, ErrNotSupported) }

// Devices fails: this build has no RDMA support.
func Devices() ([]DeviceInfo, error) { return nil, notSupported("list devices") }

// Open fails: this build has no RDMA support.
func Open(name string) (*Context, error) { return nil, notSupported("open " + name) }

// Context is an opened RDMA device (unavailable in this build).
type Context struct{}

func (c *Context) Name() string { return "" }
func (c *Context) QueryDevice() (DeviceAttr, error) {
	return DeviceAttr{}, notSupported("query device")
}
func (c *Context) QueryPort(uint8) (PortAttr, error) { return PortAttr{}, notSupported("query port") }
func (c *Context) QueryGID(uint8, int) (GID, error)  { return GID{}, notSupported("query GID") }
func (c *Context) AllocPD() (*PD, error)             { return nil, notSupported("alloc PD") }
func (c *Context) NewCompChannel() (*CompChannel, error) {
	return nil, notSupported("create completion channel")
}
func (c *Context) CreateCQ(int, *CompChannel) (*CQ, error) { return nil, notSupported("create CQ") }
func (c *Context) AsyncEvent(context.Context) (AsyncEvent, error) {
	return AsyncEvent{}, notSupported("async event")
}
func (c *Context) Close() error { return nil }

// PD is a protection domain (unavailable in this build).
type PD struct{}

func (p *PD) Register(int) (*MR, error) { return nil, notSupported("register memory") }
func (p *PD) RegisterRemoteRead(int) (*MR, error) {
	return nil, notSupported("register memory")
}
func (p *PD) RegisterForWindows(int) (*MR, error) {
	return nil, notSupported("register memory")
}
func (p *PD) AllocMW() (*MW, error)          { return nil, notSupported("allocate a memory window") }
func (p *PD) CreateQP(QPConfig) (*QP, error) { return nil, notSupported("create QP") }
func (p *PD) CreateSRQ(int) (*SRQ, error)    { return nil, notSupported("create SRQ") }
func (p *PD) Close() error                   { return nil }

// MW is a memory window (unavailable in this build).
type MW struct{}

func (w *MW) RKey() uint32     { return 0 }
func (w *MW) NextRKey() uint32 { return 0 }

// NextRKey is the key after k for a type 2 window.
func NextRKey(k uint32) uint32 { return k&^0xff | (k+1)&0xff }
func (w *MW) Close() error     { return nil }

// MR is registered memory (unavailable in this build).
type MR struct{}

func (m *MR) Bytes() []byte  { return nil }
func (m *MR) Len() int       { return 0 }
func (m *MR) LKey() uint32   { return 0 }
func (m *MR) RKey() uint32   { return 0 }
func (m *MR) Addr() uint64   { return 0 }
func (m *MR) Windowed() bool { return false }
func (m *MR) Close() error   { return nil }

// CompChannel is a completion channel (unavailable in this build).
type CompChannel struct{}

func (ch *CompChannel) Wait(context.Context) (*CQ, error) { return nil, notSupported("wait") }
func (ch *CompChannel) Close() error                      { return nil }
func (ch *CompChannel) Wake()                             {}

// CQ is a completion queue (unavailable in this build).
type CQ struct{}

func (cq *CQ) Size() int                          { return 0 }
func (cq *CQ) Poll([]WorkCompletion) (int, error) { return 0, notSupported("poll CQ") }
func (cq *CQ) ReqNotify(bool) error               { return notSupported("arm CQ") }
func (cq *CQ) Close() error                       { return nil }

// QP is a reliable-connected queue pair (unavailable in this build).
type QP struct{}

func (q *QP) Num() uint32             { return 0 }
func (q *QP) MaxInline() int          { return 0 }
func (q *QP) MaxSendWR() int          { return 0 }
func (q *QP) MaxRecvWR() int          { return 0 }
func (q *QP) State() (QPState, error) { return QPUnknown, notSupported("query QP") }
func (q *QP) ToInit(uint8) error      { return notSupported("modify QP") }
func (q *QP) ToRTR(RTRAttr) error     { return notSupported("modify QP") }
func (q *QP) ToRTS(RTSAttr) error     { return notSupported("modify QP") }
func (q *QP) ToError() error          { return notSupported("modify QP") }
func (q *QP) ToReset() error          { return notSupported("modify QP") }
func (q *QP) PostSend([]SendWR) error { return notSupported("post send") }
func (q *QP) PostRecv([]RecvWR) error { return notSupported("post recv") }
func (q *QP) Close() error            { return nil }

// SRQ is a shared receive queue (unavailable in this build).
type SRQ struct{}

func (s *SRQ) MaxWR() int              { return 0 }
func (s *SRQ) PostRecv([]RecvWR) error { return notSupported("post SRQ recv") }
func (s *SRQ) Arm(int) error           { return notSupported("arm SRQ") }
func (s *SRQ) Close() error            { return nil }
