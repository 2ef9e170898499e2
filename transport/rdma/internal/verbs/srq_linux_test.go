//go:build linux && cgo

package verbs

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestSRQ: two receiving QPs take their receives from one SRQ and complete
// them on one shared CQ; each completion names its QP, whichever buffer it
// took. The SRQ's limit event fires once the posted receives drop below it,
// a QP of the SRQ refuses PostRecv, and the SRQ cannot close under its QPs.
func TestSRQ(t *testing.T) {
	ctx, e := openTest(t)
	// p.a sends to p.b as usual; p.b's receive queue is replaced below by
	// QPs on the SRQ.
	p := newPair(t, ctx, e, pairOpts{noAccept: true})
	srq, err := p.pd.CreateSRQ(16)
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "SRQ", srq)
	if srq.MaxWR() < 16 {
		t.Fatalf("MaxWR() = %d, asked for 16", srq.MaxWR())
	}
	shared, err := ctx.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	closeLater(t, "shared CQ", shared)
	senders := make([]*QP, 2)
	receivers := make([]*QP, 2)
	for i := range senders {
		if senders[i], err = p.pd.CreateQP(QPConfig{SendCQ: p.acq, RecvCQ: p.acq, MaxSendWR: 16, MaxRecvWR: 1}); err != nil {
			t.Fatal(err)
		}
		closeLater(t, "sender QP", senders[i])
		if receivers[i], err = p.pd.CreateQP(QPConfig{SendCQ: shared, RecvCQ: shared, SRQ: srq, MaxSendWR: 16}); err != nil {
			t.Fatal(err)
		}
		closeLater(t, "SRQ QP", receivers[i])
	}
	if err := srq.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("SRQ.Close with QPs attached = %v, want EBUSY", err)
	}
	for _, q := range append(append([]*QP{}, senders...), receivers...) {
		if err := q.ToInit(1); err != nil {
			t.Fatal(err)
		}
	}
	var pe *PostError
	if err := receivers[0].PostRecv([]RecvWR{{ID: 1, MR: p.mr, Length: 64}}); !errors.As(err, &pe) {
		t.Fatalf("PostRecv on a QP of an SRQ = %v, want a PostError", err)
	}
	const slot, n = 1024, 4
	wrs := make([]RecvWR, n)
	for i := range wrs {
		wrs[i] = RecvWR{ID: uint64(500 + i), MR: p.mr, Offset: uint32(32<<10 + i*slot), Length: slot}
	}
	if err := srq.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
	if err := srq.Arm(n - 1); err != nil {
		t.Fatal(err)
	}
	if err := srq.Arm(srq.MaxWR()); err == nil {
		t.Error("Arm(MaxWR) accepted")
	}
	for i := range senders {
		pq := &pair{env: e, ctx: ctx, a: senders[i], b: receivers[i], mtu: p.mtu, gid: p.gid}
		pq.connect(t)
	}
	// Two messages on each connection, interleaved.
	buf := p.mr.Bytes()
	for round := range 2 {
		for i, q := range senders {
			off := uint32((round*2 + i) * 100)
			fill(buf[off:off+100], byte(round*2+i))
			if err := q.PostSend([]SendWR{{ID: uint64(round*2 + i), MR: p.mr, Offset: off, Length: 100, Signaled: true, HasImm: true, Imm: uint32(round*2 + i)}}); err != nil {
				t.Fatal(err)
			}
			// One at a time: the order in which they take SRQ buffers is
			// then known.
			if wc := pollN(t, p.acq, 1)[0]; wc.Err() != nil {
				t.Fatalf("send %d: %v", round*2+i, wc.Err())
			}
		}
	}
	got := pollN(t, shared, n)
	seen := map[uint64]bool{}
	for k, wc := range got {
		if err := wc.Err(); err != nil {
			t.Fatalf("receive %d: %v", k, err)
		}
		want := receivers[wc.Imm%2].Num()
		if wc.QPNum != want || wc.ByteLen != 100 || seen[wc.ID] || wc.ID < 500 || wc.ID >= 500+n {
			t.Errorf("receive %d = %+v: want QP %d, 100 bytes, a fresh SRQ buffer", k, wc, want)
		}
		seen[wc.ID] = true
		off := 32<<10 + int(wc.ID-500)*slot
		sameBytes(t, "SRQ receive", buf[off:off+100], buf[wc.Imm*100:wc.Imm*100+100])
	}
	// Four taken, none left: below the limit of 3.
	ectx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		ev, err := ctx.AsyncEvent(ectx)
		if err != nil {
			t.Fatalf("waiting for the SRQ limit event: %v", err)
		}
		if ev.Type == EventSRQLimitReached {
			break
		}
		t.Logf("other async event: %v", ev)
	}
}
