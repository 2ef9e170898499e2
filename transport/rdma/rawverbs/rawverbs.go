package rawverbs

import (
	"context"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// Device is an opened RDMA device with a protection domain, on port 1.
type Device struct {
	ctx      *verbs.Context
	pd       *verbs.PD
	gid      verbs.GID
	gidIndex int
	mtu      int
}

// Open opens the device name; gidIndex selects the GID that the
// endpoints' queue pairs address each other with (a RoCE v2 GID of the
// host's IP).
func Open(name string, gidIndex int) (*Device, error) {
	ctx, err := verbs.Open(name)
	if err != nil {
		return nil, err
	}
	d := &Device{ctx: ctx, gidIndex: gidIndex}
	pa, err := ctx.QueryPort(1)
	if err == nil {
		d.mtu = pa.ActiveMTU
		d.gid, err = ctx.QueryGID(1, gidIndex)
	}
	if err == nil {
		d.pd, err = ctx.AllocPD()
	}
	if err != nil {
		ctx.Close()
		return nil, err
	}
	return d, nil
}

// Close frees the device, once its endpoints are closed.
func (d *Device) Close() {
	d.pd.Close()
	d.ctx.Close()
}

// Endpoint is one side of a raw ping-pong: a QP with its own CQ (and a
// completion channel when it sleeps), bufs receive buffers and bufs send
// buffers of size bytes in one registered region.
type Endpoint struct {
	ch   *verbs.CompChannel // nil: busy polling
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
	size int
	bufs int
	wcs  []verbs.WorkCompletion
	out  []Completion
	sent int // sends posted, to pick the next send buffer
}

// Completion is a finished work request of an endpoint's.
type Completion struct {
	Recv bool  // a receive (else a send)
	Quit bool  // the peer's SendQuit (a receive), or this end's (a send)
	Buf  int   // a receive's buffer, to post again with PostRecv
	Len  int   // a receive's bytes
	Err  error // the work request failed
}

// NewEndpoint makes an endpoint with bufs receive and bufs send buffers of
// size bytes, every receive posted; sleep: Poll waits on a completion
// channel instead of polling busily.
func (d *Device) NewEndpoint(size, bufs int, sleep bool) (*Endpoint, error) {
	e := &Endpoint{size: size, bufs: bufs, wcs: make([]verbs.WorkCompletion, 2*bufs+1), out: make([]Completion, 0, 2*bufs+1)}
	var err error
	if sleep {
		if e.ch, err = d.ctx.NewCompChannel(); err != nil {
			return nil, err
		}
	}
	if e.cq, err = d.ctx.CreateCQ(4*bufs+8, e.ch); err == nil {
		e.qp, err = d.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 2*bufs + 2, MaxRecvWR: bufs + 1, MaxInlineData: 128})
	}
	if err == nil {
		e.mr, err = d.pd.Register(2 * bufs * max(size, 1))
	}
	if err == nil {
		err = e.qp.ToInit(1)
	}
	for i := 0; err == nil && i < bufs; i++ {
		err = e.PostRecv(i)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Connect connects a's and b's queue pairs to each other.
func (d *Device) Connect(a, b *Endpoint) error {
	for _, qs := range [][2]*Endpoint{{a, b}, {b, a}} {
		q, peer := qs[0].qp, qs[1].qp
		err := q.ToRTR(verbs.RTRAttr{DestQPN: peer.Num(), RQPSN: peer.Num() & 0xffffff, PathMTU: d.mtu,
			DGID: d.gid, SGIDIndex: uint8(d.gidIndex), Port: 1, MinRNRTimer: 1})
		if err != nil {
			return err
		}
		if err := q.ToRTS(verbs.RTSAttr{SQPSN: q.Num() & 0xffffff, Timeout: 17, RetryCount: 7}); err != nil {
			return err
		}
	}
	return nil
}

// Close frees the endpoint.
func (e *Endpoint) Close() {
	// In dependency order: QP, CQ, channel, memory.
	if e.qp != nil {
		e.qp.Close()
	}
	if e.cq != nil {
		e.cq.Close()
	}
	if e.ch != nil {
		e.ch.Close()
	}
	if e.mr != nil {
		e.mr.Close()
	}
}

// Work request ids: receives are their buffer's index.
const (
	sendID = 1 << 62
	quitID = sendID + 1
)

// PostRecv posts receive buffer buf (again).
func (e *Endpoint) PostRecv(buf int) error {
	return e.qp.PostRecv([]verbs.RecvWR{{ID: uint64(buf), MR: e.mr, Offset: uint32(buf * e.size), Length: uint32(e.size)}})
}

// Send posts n bytes from the next send buffer, asking for a completion
// every bufs sends so the send queue never fills.
func (e *Endpoint) Send(n int) error { return e.send(n, false) }

// SendQuit posts the end of a run: an empty message that the peer's Poll
// reports as Quit, whose own completion is reported as Quit too.
func (e *Endpoint) SendQuit() error { return e.send(0, true) }

func (e *Endpoint) send(n int, quit bool) error {
	buf := e.bufs + e.sent%e.bufs
	e.sent++
	wr := verbs.SendWR{ID: sendID, MR: e.mr, Offset: uint32(buf * e.size), Length: uint32(n),
		Signaled: e.sent%e.bufs == 0 || quit, Inline: n <= e.qp.MaxInline()}
	if quit {
		wr.ID, wr.Length, wr.HasImm, wr.Imm = quitID, 0, true, 1
	}
	return e.qp.PostSend([]verbs.SendWR{wr})
}

// Poll returns the next completions, waiting for them busily or on the
// completion channel. The slice is the endpoint's, valid until the next
// Poll.
func (e *Endpoint) Poll() ([]Completion, error) {
	for {
		n, err := e.cq.Poll(e.wcs)
		if err != nil || n > 0 {
			return e.convert(n), err
		}
		if e.ch == nil {
			continue
		}
		if err := e.cq.ReqNotify(false); err != nil {
			return nil, err
		}
		if n, err = e.cq.Poll(e.wcs); err != nil || n > 0 {
			return e.convert(n), err
		}
		if _, err := e.ch.Wait(context.Background()); err != nil {
			return nil, err
		}
	}
}

func (e *Endpoint) convert(n int) []Completion {
	out := e.out[:0]
	for i := range e.wcs[:n] {
		wc := &e.wcs[i]
		c := Completion{Recv: wc.ID < sendID, Err: wc.Err()}
		if c.Recv {
			c.Buf, c.Len, c.Quit = int(wc.ID), int(wc.ByteLen), wc.HasImm && wc.Imm == 1
		} else {
			c.Quit = wc.ID == quitID
		}
		out = append(out, c)
	}
	e.out = out
	return out
}
