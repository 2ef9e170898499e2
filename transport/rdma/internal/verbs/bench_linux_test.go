//go:build linux && cgo

package verbs

import (
	"fmt"
	"testing"
)

// BenchmarkPollEmpty is the cost of one Poll that finds nothing: the idle
// price of a busy-polling loop (one cgo crossing plus the provider's check).
func BenchmarkPollEmpty(b *testing.B) {
	ctx, _ := openTest(b)
	cq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		b.Fatal(err)
	}
	closeLater(b, "CQ", cq)
	wcs := make([]WorkCompletion, 16)
	b.ReportAllocs()
	for b.Loop() {
		if n, err := cq.Poll(wcs); n != 0 || err != nil {
			b.Fatalf("Poll = %d, %v", n, err)
		}
	}
}

// BenchmarkPostRecv posts batches of receives (one cgo call per batch) on a
// QP in INIT; when the queue is full it is reset off the clock.
func BenchmarkPostRecv(b *testing.B) {
	for _, batch := range []int{1, 8, 32, 64, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx, e := openTest(b)
			p := newPair(b, ctx, e, pairOpts{maxRecv: 1024})
			q := p.a
			wrs := make([]RecvWR, batch)
			for i := range wrs {
				wrs[i] = RecvWR{ID: uint64(i), MR: p.mr, Offset: uint32(i * 64), Length: 64}
			}
			posted := 0
			b.ReportAllocs()
			for b.Loop() {
				if posted+batch > q.MaxRecvWR() {
					b.StopTimer()
					if err := q.ToReset(); err != nil {
						b.Fatal(err)
					}
					if err := q.ToInit(1); err != nil {
						b.Fatal(err)
					}
					posted = 0
					b.StartTimer()
				}
				if err := q.PostRecv(wrs); err != nil {
					b.Fatal(err)
				}
				posted += batch
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/wr")
		})
	}
}

// BenchmarkSendRecvInline is one 64-byte inline Send from a to b and back to
// idle: post the receive, post the send, poll both completions. Under
// Soft-RoCE it mostly measures rxe; compare with ib_send_lat in the same run.
func BenchmarkSendRecvInline(b *testing.B) {
	ctx, e := openTest(b)
	p := newPair(b, ctx, e, pairOpts{inline: 64})
	p.connect(b)
	recv := []RecvWR{{ID: 1, MR: p.mr, Offset: 4096, Length: 64}}
	send := []SendWR{{ID: 2, MR: p.mr, Length: 64, Inline: true, Signaled: true}}
	wcs := make([]WorkCompletion, 4)
	poll := func(cq *CQ) {
		for {
			n, err := cq.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				if err := wcs[0].Err(); err != nil {
					b.Fatal(err)
				}
				return
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.b.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if err := p.a.PostSend(send); err != nil {
			b.Fatal(err)
		}
		poll(p.bcq)
		poll(p.acq)
	}
}

// BenchmarkRegisterRemoteRead is what a rendezvous region costs when it is
// registered for one transfer: mmap, ibv_reg_mr with remote read, then
// ibv_dereg_mr and munmap (docs/rdma.md, "Rendezvous": per transfer, not
// an arena). Touching the pages is part of it: a message is written there.
func BenchmarkRegisterRemoteRead(b *testing.B) {
	ctx, _ := openTest(b)
	pd, err := ctx.AllocPD()
	if err != nil {
		b.Fatal(err)
	}
	closeLater(b, "PD", pd)
	for _, n := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				mr, err := pd.RegisterRemoteRead(n)
				if err != nil {
					b.Fatal(err)
				}
				mem := mr.Bytes()
				for i := 0; i < len(mem); i += 4096 {
					mem[i] = 1
				}
				if err := mr.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
