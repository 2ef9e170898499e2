package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// device is the opened device the verbs rungs build queue pairs on.
type device struct {
	ctx      *verbs.Context
	pd       *verbs.PD
	gid      verbs.GID
	gidIndex int
	mtu      int
}

func openDevice(name string, gidIndex int) (*device, error) {
	ctx, err := verbs.Open(name)
	if err != nil {
		return nil, err
	}
	d := &device{ctx: ctx, gidIndex: gidIndex}
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

func (d *device) close() {
	d.pd.Close()
	d.ctx.Close()
}

// end is one side of a raw ping-pong: a QP with its own CQ (and completion
// channel when it sleeps), conc receive buffers and conc send buffers of
// size bytes in one registered region.
type end struct {
	ch   *verbs.CompChannel // nil: busy polling
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
	size int
	conc int
	wcs  []verbs.WorkCompletion
	sent int // sends posted, to pick the next send buffer
}

func (d *device) newEnd(size, conc int, sleep bool) (*end, error) {
	e := &end{size: size, conc: conc, wcs: make([]verbs.WorkCompletion, 2*conc+1)}
	var err error
	if sleep {
		if e.ch, err = d.ctx.NewCompChannel(); err != nil {
			return nil, err
		}
	}
	if e.cq, err = d.ctx.CreateCQ(4*conc+8, e.ch); err == nil {
		e.qp, err = d.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 2*conc + 2, MaxRecvWR: conc + 1, MaxInlineData: 128})
	}
	if err == nil {
		e.mr, err = d.pd.Register(2 * conc * max(size, 1))
	}
	if err == nil {
		err = e.qp.ToInit(1)
	}
	for i := 0; err == nil && i < conc; i++ {
		err = e.postRecv(i)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *end) close() {
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

func (e *end) postRecv(i int) error {
	return e.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), MR: e.mr, Offset: uint32(i * e.size), Length: uint32(e.size)}})
}

// send posts n bytes (or, with quit, the end of the run) from the next
// send buffer, asking for a completion every conc sends so the send queue
// never fills.
func (e *end) send(n int, quit bool) error {
	buf := e.conc + e.sent%e.conc
	e.sent++
	wr := verbs.SendWR{ID: sendID, MR: e.mr, Offset: uint32(buf * e.size), Length: uint32(n),
		Signaled: e.sent%e.conc == 0 || quit, Inline: n <= e.qp.MaxInline()}
	if quit {
		wr.ID, wr.Length, wr.HasImm, wr.Imm = quitID, 0, true, 1
	}
	return e.qp.PostSend([]verbs.SendWR{wr})
}

// poll returns the next completions, waiting for them busily or on the
// completion channel.
func (e *end) poll() ([]verbs.WorkCompletion, error) {
	for {
		n, err := e.cq.Poll(e.wcs)
		if err != nil || n > 0 {
			return e.wcs[:n], err
		}
		if e.ch == nil {
			continue
		}
		if err := e.cq.ReqNotify(false); err != nil {
			return nil, err
		}
		if n, err = e.cq.Poll(e.wcs); err != nil || n > 0 {
			return e.wcs[:n], err
		}
		if _, err := e.ch.Wait(context.Background()); err != nil {
			return nil, err
		}
	}
}

func connectPair(d *device, a, b *end) error {
	for _, qs := range [][2]*end{{a, b}, {b, a}} {
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

// verbsRung is the raw ping-pong: a client keeping conc requests in flight
// on one QP, a server echoing each, each on its own goroutine and CQ.
func verbsRung(d *device, sleep bool) runner {
	return func(c *cell) (func() (*hist, error), error) {
		cl, err := d.newEnd(c.size, c.conc, sleep)
		if err != nil {
			return nil, err
		}
		sv, err := d.newEnd(c.size, c.conc, sleep)
		if err != nil {
			cl.close()
			return nil, err
		}
		if err := connectPair(d, cl, sv); err != nil {
			cl.close()
			sv.close()
			return nil, err
		}
		srvErr := make(chan error, 1)
		cliRes := make(chan error, 1)
		h := newHist()
		go func() { srvErr <- verbsServe(sv) }()
		go func() { cliRes <- verbsDrive(cl, c, h) }()
		return func() (*hist, error) {
			err := errors.Join(<-cliRes, <-srvErr)
			cl.close()
			sv.close()
			return h, err
		}, nil
	}
}

// verbsServe echoes every request until the quit message.
func verbsServe(e *end) error {
	for {
		wcs, err := e.poll()
		if err != nil {
			return err
		}
		for i := range wcs {
			wc := &wcs[i]
			if err := wc.Err(); err != nil {
				return fmt.Errorf("server: %w", err)
			}
			if wc.ID >= sendID {
				continue // a send completed
			}
			if wc.HasImm && wc.Imm == 1 {
				return nil
			}
			if err := e.postRecv(int(wc.ID)); err != nil {
				return err
			}
			if err := e.send(int(wc.ByteLen), false); err != nil {
				return err
			}
		}
	}
}

// verbsDrive keeps conc requests in flight until the cell stops, recording
// the round trips of those sent while measuring; replies come in order.
func verbsDrive(e *end, c *cell, h *hist) error {
	type req struct {
		t        time.Time
		measured bool
	}
	ring := make([]req, c.conc)
	head, inFlight := 0, 0
	for range c.conc {
		ring[(head+inFlight)%c.conc] = req{time.Now(), c.phase() == measuring}
		inFlight++
		if err := e.send(c.size, false); err != nil {
			return err
		}
	}
	for inFlight > 0 {
		wcs, err := e.poll()
		if err != nil {
			return err
		}
		for i := range wcs {
			wc := &wcs[i]
			if err := wc.Err(); err != nil {
				return fmt.Errorf("client: %w", err)
			}
			if wc.ID >= sendID {
				continue
			}
			now := time.Now()
			if r := ring[head]; r.measured {
				h.add(now.Sub(r.t))
			}
			head = (head + 1) % c.conc
			inFlight--
			if err := e.postRecv(int(wc.ID)); err != nil {
				return err
			}
			if c.phase() == stopping {
				continue
			}
			ring[(head+inFlight)%c.conc] = req{now, c.phase() == measuring}
			inFlight++
			if err := e.send(c.size, false); err != nil {
				return err
			}
		}
	}
	if err := e.send(0, true); err != nil {
		return err
	}
	// The quit message's send completion: then nothing is left posted.
	for {
		wcs, err := e.poll()
		if err != nil {
			return err
		}
		for i := range wcs {
			if wcs[i].ID == quitID {
				return wcs[i].Err()
			}
		}
	}
}
