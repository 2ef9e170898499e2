//go:build linux && cgo

package verbs

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestDevicesAndQuery(t *testing.T) {
	ctx, e := openTest(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(devs, func(d DeviceInfo) bool { return d.Name == e.dev }) {
		t.Fatalf("Devices() = %+v, no %s", devs, e.dev)
	}
	t.Logf("devices: %+v", devs)
	if ctx.Name() != e.dev {
		t.Errorf("Name() = %q", ctx.Name())
	}

	da, err := ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device attr: %+v", da)
	if da.MaxQPWR <= 0 || da.MaxCQE <= 0 || da.MaxSGE <= 0 || da.MaxMRSize == 0 || da.PhysPortCount < 1 {
		t.Errorf("implausible device limits: %+v", da)
	}

	pa, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("port 1: %+v", pa)
	if pa.State != PortActive {
		t.Errorf("port 1 state %v, want ACTIVE", pa.State)
	}
	if _, err := mtuToEnum(pa.ActiveMTU); err != nil {
		t.Errorf("active MTU: %v", err)
	}
	if pa.MaxMTU < pa.ActiveMTU || pa.GIDTableLen <= e.gidIndex {
		t.Errorf("max MTU %d < active %d, or GID table of %d has no index %d", pa.MaxMTU, pa.ActiveMTU, pa.GIDTableLen, e.gidIndex)
	}
	if pa.LinkLayer != LinkLayerEthernet {
		t.Errorf("link layer %v, want Ethernet (RoCE)", pa.LinkLayer)
	}

	gid, err := ctx.QueryGID(1, e.gidIndex)
	if err != nil {
		t.Fatal(err)
	}
	if e.ip != nil && !net.IP(gid[:]).Equal(e.ip) {
		t.Errorf("GID[%d] = %v, want %v", e.gidIndex, gid, e.ip)
	}
	if _, err := ctx.QueryPort(77); err == nil {
		t.Error("QueryPort(77) succeeded")
	}
}

func TestOpenUnknownDevice(t *testing.T) {
	needDevice(t)
	_, err := Open("no-such-device")
	if !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("Open(unknown) = %v, want ENODEV", err)
	}
}

func TestPDAndMR(t *testing.T) {
	ctx, _ := openTest(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.Register(10000)
	if err != nil {
		t.Fatal(err)
	}
	b := mr.Bytes()
	if len(b) != 10000 || mr.Len() != 10000 {
		t.Fatalf("Bytes() has %d bytes, Len() %d, want 10000", len(b), mr.Len())
	}
	fill(b, 3) // the memory is ours to write
	if _, err := pd.Register(0); err == nil {
		t.Error("Register(0) succeeded")
	}

	// Dependants first: PD and context refuse to close, and stay usable.
	if err := pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("PD.Close with an open MR = %v, want EBUSY", err)
	}
	if err := ctx.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("Context.Close with an open PD = %v, want EBUSY", err)
	}
	mr2, err := pd.Register(1)
	if err != nil {
		t.Fatalf("PD unusable after a refused Close: %v", err)
	}

	for range 2 { // idempotent
		if err := mr.Close(); err != nil {
			t.Fatalf("MR.Close: %v", err)
		}
		if err := mr2.Close(); err != nil {
			t.Fatalf("MR.Close: %v", err)
		}
	}
	if mr.Bytes() != nil {
		t.Error("Bytes() after Close is not nil")
	}
	for range 2 {
		if err := pd.Close(); err != nil {
			t.Fatalf("PD.Close: %v", err)
		}
	}
	if _, err := pd.Register(4096); !errors.Is(err, ErrClosed) {
		t.Errorf("Register on a closed PD = %v, want ErrClosed", err)
	}
	if _, err := pd.CreateQP(QPConfig{}); err == nil {
		t.Error("CreateQP on a closed PD succeeded")
	}
	for range 2 {
		if err := ctx.Close(); err != nil {
			t.Fatalf("Context.Close: %v", err)
		}
	}
	if _, err := ctx.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocPD on a closed context = %v, want ErrClosed", err)
	}
	if _, err := ctx.QueryPort(1); !errors.Is(err, ErrClosed) {
		t.Errorf("QueryPort on a closed context = %v, want ErrClosed", err)
	}
	if _, err := ctx.AsyncEvent(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("AsyncEvent on a closed context = %v, want ErrClosed", err)
	}
}

func TestCQWithoutChannel(t *testing.T) {
	ctx, _ := openTest(t)
	cq, err := ctx.CreateCQ(10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cq.Size() < 10 {
		t.Errorf("Size() = %d, want at least 10", cq.Size())
	}
	var wcs [8]WorkCompletion
	if n, err := cq.Poll(wcs[:]); n != 0 || err != nil {
		t.Errorf("Poll(empty CQ) = %d, %v", n, err)
	}
	if n, err := cq.Poll(nil); n != 0 || err != nil {
		t.Errorf("Poll(nil) = %d, %v", n, err)
	}
	if err := cq.ReqNotify(false); err == nil {
		t.Error("ReqNotify without a channel succeeded")
	}
	for range 2 {
		if err := cq.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cq.Poll(wcs[:]); !errors.Is(err, ErrClosed) {
		t.Errorf("Poll after Close = %v, want ErrClosed", err)
	}
	if _, err := ctx.CreateCQ(0, nil); err == nil {
		t.Error("CreateCQ(0) succeeded")
	}
}

// TestSendRecv exchanges Sends and Sends with immediate, inline and not,
// with and without payload, and checks that only signaled sends complete.
func TestSendRecv(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{inline: 64})
	if p.a.MaxInline() < 64 {
		t.Fatalf("MaxInline() = %d, asked for 64", p.a.MaxInline())
	}
	buf := p.mr.Bytes()
	const sendOff, recvOff, slot = 0, 32 << 10, 2048
	for i := range 5 {
		err := p.b.PostRecv([]RecvWR{{ID: uint64(200 + i), MR: p.mr, Offset: uint32(recvOff + i*slot), Length: slot}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.PostRecv([]RecvWR{{ID: 300, MR: p.mr, Offset: recvOff + 5*slot, Length: slot}}); err != nil {
		t.Fatal(err)
	}
	p.connect(t)
	for _, q := range []*QP{p.a, p.b} {
		if st, err := q.State(); err != nil || st != QPRTS {
			t.Fatalf("QP %d state %v, %v; want RTS", q.Num(), st, err)
		}
	}

	sizes := []uint32{1000, 32, 0, 16, slot}
	msgs := []SendWR{
		{ID: 100, Signaled: true},                                // plain send
		{ID: 101, Inline: true, HasImm: true, Imm: 0xdeadbeef},   // unsignaled, inline, imm
		{ID: 102, HasImm: true, Imm: 0x01020304},                 // unsignaled, no payload
		{ID: 103, Inline: true, Signaled: true, Solicited: true}, // inline, signaled
		{ID: 104, Signaled: true, HasImm: true, Imm: 7},          // a whole receive buffer
	}
	off := uint32(sendOff)
	for i := range msgs {
		msgs[i].Length = sizes[i]
		if sizes[i] > 0 {
			msgs[i].MR, msgs[i].Offset = p.mr, off
			fill(buf[off:off+sizes[i]], byte(i+1))
			off += sizes[i]
		}
	}
	if err := p.a.PostSend(msgs); err != nil {
		t.Fatal(err)
	}

	// Receiver: one completion per message, in order, with the right length,
	// immediate data and bytes.
	recv := pollN(t, p.bcq, len(msgs))
	for i, wc := range recv {
		m := msgs[i]
		if err := wc.Err(); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if wc.ID != uint64(200+i) || wc.Opcode != WCRecv || !wc.Opcode.IsRecv() || wc.ByteLen != m.Length ||
			wc.HasImm != m.HasImm || wc.Imm != m.Imm || wc.QPNum != p.b.Num() {
			t.Errorf("receive %d = %+v, for send %+v", i, wc, m)
		}
		got := buf[recvOff+i*slot : recvOff+i*slot+int(wc.ByteLen)]
		sameBytes(t, "message "+string(rune('0'+i)), got, buf[m.Offset:m.Offset+m.Length])
	}
	// Sender: only the signaled sends complete (selective signaling).
	sent := pollN(t, p.acq, 3)
	for i, wantID := range []uint64{100, 103, 104} {
		if sent[i].Err() != nil || sent[i].ID != wantID || sent[i].Opcode != WCSend || sent[i].QPNum != p.a.Num() {
			t.Errorf("send completion %d = %+v, want ID %d", i, sent[i], wantID)
		}
	}
	expectEmpty(t, p.acq, "after the signaled sends")
	expectEmpty(t, p.bcq, "after all receives")

	// And the other way round.
	fill(buf[:100], 42)
	if err := p.b.PostSend([]SendWR{{ID: 400, MR: p.mr, Length: 100, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, p.acq, 1)[0]; wc.Err() != nil || wc.ID != 300 || wc.ByteLen != 100 {
		t.Errorf("b→a receive: %+v", wc)
	}
	sameBytes(t, "b→a", buf[recvOff+5*slot:recvOff+5*slot+100], buf[:100])
	if wc := pollN(t, p.bcq, 1)[0]; wc.Err() != nil || wc.ID != 400 {
		t.Errorf("b→a send completion: %+v", wc)
	}
}

// TestPostValidation checks that malformed batches are refused whole.
func TestPostValidation(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{mrSize: 4096, inline: 16})
	p.connect(t)
	ok := SendWR{ID: 1, MR: p.mr, Length: 8, Signaled: true}
	for name, wr := range map[string]SendWR{
		"range past the MR":   {MR: p.mr, Offset: 4000, Length: 200},
		"nil MR with payload": {Length: 1},
		"inline too long":     {MR: p.mr, Length: uint32(p.a.MaxInline() + 1), Inline: true},
	} {
		err := p.a.PostSend([]SendWR{ok, wr})
		var pe *PostError
		if !errors.As(err, &pe) || pe.Index != 1 || pe.Posted != 0 {
			t.Errorf("%s: PostSend = %v, want a PostError at index 1 with nothing posted", name, err)
		}
	}
	err := p.b.PostRecv([]RecvWR{{MR: p.mr, Offset: 4096, Length: 1}})
	var pe *PostError
	if !errors.As(err, &pe) || pe.Index != 0 || pe.Posted != 0 {
		t.Errorf("PostRecv past the MR = %v", err)
	}
	expectEmpty(t, p.acq, "after refused posts")
	expectEmpty(t, p.bcq, "after refused posts")
}

// TestPostInReset checks that posting before the QP is ready is an error,
// not a crash or a silently queued request.
func TestPostInReset(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{noAccept: true})
	if st, err := p.a.State(); err != nil || st != QPReset {
		t.Fatalf("new QP state %v, %v; want RESET", st, err)
	}
	send := []SendWR{{ID: 1, MR: p.mr, Length: 8, Signaled: true}}
	recv := []RecvWR{{ID: 2, MR: p.mr, Length: 64}}
	if err := p.a.PostSend(send); !errors.Is(err, ErrQPState) {
		t.Errorf("PostSend in RESET = %v, want ErrQPState", err)
	}
	if err := p.a.PostRecv(recv); !errors.Is(err, ErrQPState) {
		t.Errorf("PostRecv in RESET = %v, want ErrQPState", err)
	}
	if err := p.a.ToInit(1); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(send); !errors.Is(err, ErrQPState) {
		t.Errorf("PostSend in INIT = %v, want ErrQPState", err)
	}
	if err := p.a.PostRecv(recv); err != nil {
		t.Errorf("PostRecv in INIT: %v", err)
	}
	if err := p.a.ToRTS(RTSAttr{}); err == nil {
		t.Error("INIT → RTS (skipping RTR) succeeded")
	}
	if err := p.a.ToRTR(RTRAttr{PathMTU: 1000}); err == nil {
		t.Error("ToRTR with an invalid MTU succeeded")
	}
}

// TestRNRRetryExceeded proves rnr_retry is 0: a Send to a QP with no posted
// receive fails at once with IBV_WC_RNR_RETRY_EXC_ERR and kills the QP.
func TestRNRRetryExceeded(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{})
	p.connect(t) // b posts no receive
	start := time.Now()
	if err := p.a.PostSend([]SendWR{{ID: 9, MR: p.mr, Length: 64, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	wc := pollN(t, p.acq, 1)[0]
	t.Logf("completion after %v: %v", time.Since(start), wc.Err())
	if wc.Status != WCRNRRetryExcErr || wc.ID != 9 {
		t.Fatalf("completion %+v (%v), want IBV_WC_RNR_RETRY_EXC_ERR", wc, wc.Status)
	}
	var wce *WCError
	if err := wc.Err(); !errors.As(err, &wce) || wce.Status != WCRNRRetryExcErr {
		t.Errorf("Err() = %v", err)
	}
	if st, err := p.a.State(); err != nil || st != QPError {
		t.Errorf("sender QP state after RNR: %v, %v; want ERR", st, err)
	}
	// A QP in ERR flushes whatever is posted next.
	if err := p.a.PostSend([]SendWR{{ID: 10, Signaled: true}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollN(t, p.acq, 1)[0]; wc.Status != WCWRFlushErr || wc.ID != 10 {
		t.Errorf("send on an ERR QP: %+v, want a flush", wc)
	}
}

// TestToErrorFlushes is the teardown path: ERR flushes posted receives.
func TestToErrorFlushes(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{})
	recv := make([]RecvWR, 40) // more than one C chunk
	for i := range recv {
		recv[i] = RecvWR{ID: uint64(i), MR: p.mr, Offset: uint32(i * 64), Length: 64}
	}
	if err := p.b.PostRecv(recv); err != nil {
		t.Fatal(err)
	}
	p.connect(t)
	if err := p.b.ToError(); err != nil {
		t.Fatal(err)
	}
	wcs := pollN(t, p.bcq, len(recv))
	for i, wc := range wcs {
		if wc.Status != WCWRFlushErr || wc.ID != uint64(i) {
			t.Fatalf("flushed receive %d: %+v", i, wc)
		}
	}
	if err := p.b.ToReset(); err != nil {
		t.Fatal(err)
	}
	if err := p.b.PostRecv(recv[:1]); !errors.Is(err, ErrQPState) {
		t.Errorf("PostRecv after ToReset = %v, want ErrQPState", err)
	}
}

// TestPostBatchOverflow fills a receive queue in batches until the provider
// refuses one, and checks that exactly the work requests reported posted
// were posted: they are the ones that flush.
func TestPostBatchOverflow(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{maxRecv: 16})
	const batch = 5
	recv := make([]RecvWR, batch)
	for i := range recv {
		recv[i] = RecvWR{MR: p.mr, Offset: uint32(i * 16), Length: 16}
	}
	posted := 0
	var pe *PostError
	for posted <= 4*p.b.MaxRecvWR()+batch {
		err := p.b.PostRecv(recv)
		if err == nil {
			posted += batch
			continue
		}
		if !errors.As(err, &pe) || pe.Index != pe.Posted || pe.Posted >= batch {
			t.Fatalf("overflowing post = %v, want a PostError naming the first refused request", err)
		}
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			t.Errorf("PostError %v does not carry the errno", err)
		}
		t.Logf("queue of %d (asked 16) full after %d: %v", p.b.MaxRecvWR(), posted+pe.Posted, err)
		posted += pe.Posted
		break
	}
	if pe == nil {
		t.Fatalf("%d receives posted on a queue of %d without an error", posted, p.b.MaxRecvWR())
	}
	if posted < p.b.MaxRecvWR() {
		t.Errorf("queue full after %d receives, but MaxRecvWR() is %d", posted, p.b.MaxRecvWR())
	}
	if err := p.b.ToError(); err != nil {
		t.Fatal(err)
	}
	pollN(t, p.bcq, posted)
	expectEmpty(t, p.bcq, "after the posted receives flushed")
}

func TestCompChannelWait(t *testing.T) {
	ctx, e := openTest(t)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "completion channel", ch)
	p := newPair(t, ctx, e, pairOpts{ch: ch})
	if err := p.b.PostRecv([]RecvWR{{ID: 0, MR: p.mr, Length: 256}}); err != nil {
		t.Fatal(err)
	}
	p.connect(t)
	// More rounds than ackBatch, so acknowledging in batches is exercised.
	for round := range ackBatch + 6 {
		if err := p.bcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if err := p.a.PostSend([]SendWR{{ID: uint64(round), MR: p.mr, Offset: 1024, Length: 8, Signaled: true}}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cq, err := ch.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Wait: %v", round, err)
		}
		if cq != p.bcq {
			t.Fatalf("round %d: Wait returned another CQ", round)
		}
		if wc := pollN(t, p.bcq, 1)[0]; wc.Err() != nil {
			t.Fatal(wc.Err())
		}
		if err := p.b.PostRecv([]RecvWR{{ID: uint64(round + 1), MR: p.mr, Length: 256}}); err != nil {
			t.Fatal(err)
		}
		if wc := pollN(t, p.acq, 1)[0]; wc.Err() != nil { // a's CQ is not armed: polled only
			t.Fatal(wc.Err())
		}
	}
	// The rest of the events are acknowledged by CQ.Close (in cleanup),
	// which would hang otherwise.
}

func TestWaitContext(t *testing.T) {
	ctx, _ := openTest(t)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "completion channel", ch)
	cq, err := ctx.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "CQ", cq)
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ch.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled) = %v", err)
	}
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ch.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait(with deadline, no event) = %v", err)
	}
	// A cancelled wait must not poison the next one.
	cctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := ch.Wait(cctx); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait cancelled while blocked = %v", err)
	}
	// A waiter queued behind a blocked one still honours its context
	// (before the first one is released).
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() { _, err := ch.Wait(actx); adone <- err }()
	bctx, bcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer bcancel()
	if _, err := ch.Wait(bctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second concurrent Wait = %v, want DeadlineExceeded", err)
	}
	acancel()
	if err := <-adone; !errors.Is(err, context.Canceled) {
		t.Errorf("first concurrent Wait = %v, want Canceled", err)
	}
}

func TestCompChannelCloseUnblocksWait(t *testing.T) {
	ctx, _ := openTest(t)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		_, err := ch.Wait(context.Background())
		done <- err
	}()
	<-started
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close = %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not unblock Wait")
	}
	if _, err := ch.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait on a closed channel = %v", err)
	}
	if _, err := ctx.CreateCQ(4, ch); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateCQ on a closed channel = %v", err)
	}
	// The CQ outlives the channel's Close and keeps it alive (and counted).
	if n, err := cq.Poll(make([]WorkCompletion, 4)); n != 0 || err != nil {
		t.Errorf("Poll on a CQ of a closed channel = %d, %v", n, err)
	}
	if err := ctx.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("Context.Close with a CQ open = %v, want EBUSY", err)
	}
	if err := cq.Close(); err != nil { // destroys the channel too
		t.Fatal(err)
	}
	if err := ctx.Close(); err != nil {
		t.Fatalf("Context.Close after CQ and channel: %v", err)
	}
}

// TestCloseOrder checks the ownership rules and use after Close.
func TestCloseOrder(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{})
	if err := p.acq.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("CQ.Close with a QP on it = %v, want EBUSY", err)
	}
	if err := p.pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("PD.Close with QPs and MR = %v, want EBUSY", err)
	}
	for range 2 {
		if err := p.a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.PostRecv([]RecvWR{{MR: p.mr, Length: 8}}); !errors.Is(err, ErrClosed) {
		t.Errorf("PostRecv after Close = %v, want ErrClosed", err)
	}
	if err := p.a.PostSend([]SendWR{{MR: p.mr, Length: 8}}); !errors.Is(err, ErrClosed) {
		t.Errorf("PostSend after Close = %v, want ErrClosed", err)
	}
	if _, err := p.a.State(); !errors.Is(err, ErrClosed) {
		t.Errorf("State after Close = %v, want ErrClosed", err)
	}
	if err := p.a.ToError(); !errors.Is(err, ErrClosed) {
		t.Errorf("ToError after Close = %v, want ErrClosed", err)
	}
	if err := p.acq.Close(); err != nil {
		t.Errorf("CQ.Close after its QP: %v", err)
	}
	if _, err := p.pd.CreateQP(QPConfig{SendCQ: p.acq, RecvCQ: p.acq, MaxSendWR: 1, MaxRecvWR: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("CreateQP with a closed CQ = %v, want ErrClosed", err)
	}
	if err := p.mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.b.ToInit(1); err != nil {
		t.Fatal(err)
	}
	if err := p.b.PostRecv([]RecvWR{{MR: p.mr, Length: 8}}); !errors.Is(err, ErrClosed) {
		t.Errorf("PostRecv naming a closed MR = %v, want ErrClosed", err)
	}
	// The remaining objects are closed by cleanup, in order.
}

// TestConcurrentCloseVsUse races Close against posts and polls; run with
// -race. Every call must either work or fail cleanly.
func TestConcurrentCloseVsUse(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{maxRecv: 256})
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	// allowed: the object is closed, or the receive queue is full.
	check := func(err error) (stop bool) {
		switch {
		case err == nil, errors.Is(err, syscall.ENOMEM):
			return false
		case errors.Is(err, ErrClosed):
			return true
		}
		errc <- err
		return true
	}
	poster := func(wr RecvWR) {
		defer wg.Done()
		for !check(p.b.PostRecv([]RecvWR{wr, wr})) {
		}
	}
	wg.Add(4)
	go poster(RecvWR{MR: p.mr, Length: 64}) // stops when the MR closes
	go poster(RecvWR{MR: p.mr, Length: 64})
	go poster(RecvWR{}) // stops when the QP closes
	go func() {
		defer wg.Done()
		wcs := make([]WorkCompletion, 8)
		for {
			if _, err := p.bcq.Poll(wcs); check(err) {
				return
			}
		}
	}()
	for _, c := range []interface{ Close() error }{p.mr, p.b, p.bcq} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("unexpected error racing Close: %v", err)
	}
}

func TestAsyncEventContext(t *testing.T) {
	ctx, _ := openTest(t)
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if ev, err := ctx.AsyncEvent(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AsyncEvent with nothing happening = %v, %v; want DeadlineExceeded", ev, err)
	}
}

func TestAsyncEventCloseUnblocks(t *testing.T) {
	e := needDevice(t)
	ctx, err := Open(e.dev)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ctx.AsyncEvent(context.Background())
		done <- err
	}()
	if err := ctx.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("AsyncEvent after Close = %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not unblock AsyncEvent")
	}
}

// TestAsyncEventPortFlap takes the device's netdev down and up again and
// expects the port events, which proves the async fd is read and acked.
func TestAsyncEventPortFlap(t *testing.T) {
	if role := os.Getenv("ROLE"); role != "" && role != "single" {
		t.Skipf("ROLE=%s: taking the shared link down would break the peer's tests", role)
	}
	ctx, e := openTest(t)
	netdev, err := gidNetdev(e.dev, 1, e.gidIndex)
	if err != nil {
		t.Fatal(err)
	}
	gidBefore, err := ctx.QueryGID(1, e.gidIndex)
	if err != nil {
		t.Fatal(err)
	}
	expect := func(want EventType) {
		t.Helper()
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			ev, err := ctx.AsyncEvent(wctx)
			if err != nil {
				t.Fatalf("waiting for %v: %v", want, err)
			}
			t.Logf("async event: %v", ev)
			if ev.Type == want {
				if ev.Port != 1 {
					t.Errorf("%v on port %d, want 1", ev.Type, ev.Port)
				}
				return
			}
		}
	}
	if err := setLinkUp(netdev, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setLinkUp(netdev, true) })
	expect(EventPortErr)
	if err := setLinkUp(netdev, true); err != nil {
		t.Fatal(err)
	}
	expect(EventPortActive)
	if pa, err := ctx.QueryPort(1); err != nil || pa.State != PortActive {
		t.Errorf("port after flap: %+v, %v", pa, err)
	}
	if gid, err := ctx.QueryGID(1, e.gidIndex); err != nil || gid != gidBefore {
		t.Fatalf("GID[%d] changed across the flap: %v → %v (%v)", e.gidIndex, gidBefore, gid, err)
	}
}

// TestNoRDMAHost runs where the kernel has no RDMA device (the build host):
// no device is an empty list, and opening one fails cleanly.
func TestNoRDMAHost(t *testing.T) {
	if ents, _ := os.ReadDir("/sys/class/infiniband"); len(ents) > 0 {
		t.Skip("this host has RDMA devices")
	}
	devs, err := Devices()
	if err != nil || devs == nil || len(devs) != 0 {
		t.Errorf("Devices() = %#v, %v; want an empty list", devs, err)
	}
	if _, err := Open("rxe0"); err == nil {
		t.Error("Open succeeded without devices")
	} else {
		t.Log(err)
	}
}

// Wake stops a Wait that has no context to cancel, whether it comes while
// the Wait blocks or before it starts, once: the Wait after it blocks again.
func TestCompChannelWake(t *testing.T) {
	ctx, _ := openTest(t)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "completion channel", ch)
	cq, err := ctx.CreateCQ(4, ch)
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "CQ", cq)
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ch.Wait(context.Background()); done <- err }()
	ch.Wake()
	if err := <-done; !errors.Is(err, ErrWoken) {
		t.Fatalf("Wait woken while blocked = %v, want ErrWoken", err)
	}
	ch.Wake()
	if _, err := ch.Wait(context.Background()); !errors.Is(err, ErrWoken) {
		t.Fatalf("Wait after a Wake = %v, want ErrWoken", err)
	}
	// The wake is spent: this Wait blocks until its deadline.
	dctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ch.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait after a spent Wake = %v, want DeadlineExceeded", err)
	}
}

// Wait allocates nothing (with a context that cannot be cancelled): the
// transport's poller waits on its channel several times per message.
func TestCompChannelWaitAllocs(t *testing.T) {
	ctx, e := openTest(t)
	ch, err := ctx.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "completion channel", ch)
	p := newPair(t, ctx, e, pairOpts{ch: ch})
	p.connect(t)
	bg := context.Background()
	// An event each round: b's CQ armed, a receive posted, a send to it.
	round := 0
	event := func() {
		if err := p.b.PostRecv([]RecvWR{{ID: uint64(round), MR: p.mr, Length: 256}}); err != nil {
			t.Fatal(err)
		}
		if err := p.bcq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if err := p.a.PostSend([]SendWR{{ID: uint64(round), MR: p.mr, Offset: 1024, Length: 8, Signaled: true}}); err != nil {
			t.Fatal(err)
		}
		cq, err := ch.Wait(bg)
		if err != nil || cq != p.bcq {
			t.Fatalf("round %d: Wait = %v, %v; want b's CQ", round, cq, err)
		}
		pollN(t, p.bcq, 1)
		pollN(t, p.acq, 1)
		round++
	}
	event()
	// What the rest of the round costs, without the Wait, is not Wait's.
	base := testing.AllocsPerRun(50, func() {
		if err := p.b.PostRecv([]RecvWR{{ID: uint64(round), MR: p.mr, Length: 256}}); err != nil {
			t.Fatal(err)
		}
		if err := p.a.PostSend([]SendWR{{ID: uint64(round), MR: p.mr, Offset: 1024, Length: 8, Signaled: true}}); err != nil {
			t.Fatal(err)
		}
		pollN(t, p.bcq, 1)
		pollN(t, p.acq, 1)
		round++
	})
	if got := testing.AllocsPerRun(50, event) - base; got > 0 {
		t.Errorf("Wait for an event allocates %.1f objects, want 0", got)
	}
	woken := func() {
		ch.Wake()
		if _, err := ch.Wait(bg); !errors.Is(err, ErrWoken) {
			t.Fatalf("Wait after a Wake = %v, want ErrWoken", err)
		}
	}
	if got := testing.AllocsPerRun(50, woken); got > 0 {
		t.Errorf("Wait after a Wake allocates %.1f objects, want 0", got)
	}
}
