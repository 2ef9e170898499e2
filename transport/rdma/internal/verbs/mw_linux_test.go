//go:build linux && cgo

package verbs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestMemoryWindow: b binds a type 2 window to part of an MR registered
// for windows, and a reads it with the window's key. The key grants that
// range only, only until b invalidates it; a rebind gets a new key and the
// old one is dead; the MR's own key grants nothing. A refused read is a
// remote access error at a (and breaks that QP pair only).
func TestMemoryWindow(t *testing.T) {
	ctx, e := openTest(t)
	const size, off, n = 1 << 20, 8192, 256 << 10
	cases := []struct {
		name string
		// after the bind: invalidate, or rebind elsewhere, before a reads
		invalidate, rebind bool
		key                string // "window", "old" (the key before the last bind), "mr"
		off                uint64 // into the MR
		n                  uint32
		want               WCStatus
		lax                bool // the device may let it succeed
	}{
		{name: "window", key: "window", off: off, n: n, want: WCSuccess},
		{name: "part", key: "window", off: off + 100, n: 1000, want: WCSuccess},
		// rxe on 6.1 checks a window's reads against its MR's bounds, not
		// the window's (lax: then the rendezvous scrubs the bytes past
		// the message, rendezvous_window.go); past the MR is refused.
		{name: "before the window", key: "window", off: off - 10, n: 20, want: WCRemAccessErr, lax: true},
		{name: "past the window", key: "window", off: off + n - 10, n: 20, want: WCRemAccessErr, lax: true},
		{name: "past the MR", key: "window", off: size - 10, n: 20, want: WCRemAccessErr},
		{name: "invalidated", invalidate: true, key: "window", off: off, n: 4096, want: WCRemAccessErr},
		{name: "old key after a rebind", rebind: true, key: "old", off: off, n: 4096, want: WCRemAccessErr},
		{name: "new key after a rebind", rebind: true, key: "window", off: 0, n: 4096, want: WCSuccess},
		{name: "the MR's own key", key: "mr", off: off, n: 4096, want: WCRemAccessErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, ctx, e, pairOpts{mrSize: size, read: true})
			p.connect(t)
			src, err := p.pd.RegisterForWindows(size)
			if err != nil {
				t.Fatal(err)
			}
			closeLater(t, "MR for windows", src)
			if src.RKey() != 0 {
				t.Errorf("an MR for windows reports rkey %#x", src.RKey())
			}
			fill(src.Bytes(), 5)
			mw, err := p.pd.AllocMW()
			if errors.Is(err, syscall.EOPNOTSUPP) {
				t.Skipf("no type 2 memory windows on this device: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// Before the MR and the QPs (closeLater runs LIFO).
				if err := mw.Close(); err != nil {
					t.Errorf("closing the window: %v", err)
				}
			})
			bind := func(off uint64, n uint32) {
				t.Helper()
				err := p.b.PostSend([]SendWR{{ID: 1, Bind: mw, MR: src, Offset: uint32(off), Length: n, RKey: mw.NextRKey(), Signaled: true}})
				if err != nil {
					t.Fatal(err)
				}
				if wc := pollN(t, p.bcq, 1)[0]; wc.Status != WCSuccess || wc.Opcode != WCBindMW {
					t.Fatalf("bind completed with %v, opcode %v", wc.Status, wc.Opcode)
				}
			}
			before := mw.RKey()
			bind(off, n)
			old := mw.RKey()
			if old == before {
				t.Fatalf("the bind kept the key %#x", old)
			}
			if tc.invalidate {
				if err := p.b.PostSend([]SendWR{{ID: 2, Invalidate: true, RKey: mw.RKey(), Signaled: true}}); err != nil {
					t.Fatal(err)
				}
				if wc := pollN(t, p.bcq, 1)[0]; wc.Status != WCSuccess || wc.Opcode != WCLocalInv {
					t.Fatalf("invalidation completed with %v, opcode %v", wc.Status, wc.Opcode)
				}
			}
			if tc.rebind {
				if err := p.b.PostSend([]SendWR{{ID: 2, Invalidate: true, RKey: mw.RKey(), Signaled: true}}); err != nil {
					t.Fatal(err)
				}
				pollN(t, p.bcq, 1)
				bind(0, 8192)
			}
			key := map[string]uint32{"window": mw.RKey(), "old": old, "mr": src.rkey}[tc.key]
			err = p.a.PostSend([]SendWR{{ID: 9, MR: p.mr, Length: tc.n, Read: true, RemoteAddr: src.Addr() + tc.off, RKey: key, Signaled: true}})
			if err != nil {
				t.Fatal(err)
			}
			wc := pollN(t, p.acq, 1)[0]
			if tc.lax && wc.Status == WCSuccess {
				t.Logf("the device let a window's key read outside the window, within its MR")
				return
			}
			if wc.Status != tc.want {
				t.Fatalf("read with the %s key %#x completed with %v, want %v", tc.key, key, wc.Status, tc.want)
			}
			if tc.want == WCSuccess {
				sameBytes(t, "read", p.mr.Bytes()[:tc.n], src.Bytes()[tc.off:tc.off+uint64(tc.n)])
			}
		})
	}
}

// BenchmarkBindWindow is what a rendezvous region costs from a registered
// arena with a memory window instead of a registration per transfer
// (BenchmarkRegisterRemoteRead): bind the window to the message's range,
// wait for the bind, invalidate it, wait for that.
func BenchmarkBindWindow(b *testing.B) {
	ctx, e := openTest(b)
	for _, n := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			p := newPair(b, ctx, e, pairOpts{read: true})
			p.connect(b)
			src, err := p.pd.RegisterForWindows(n)
			if err != nil {
				b.Fatal(err)
			}
			closeLater(b, "MR for windows", src)
			mw, err := p.pd.AllocMW()
			if err != nil {
				b.Fatal(err)
			}
			defer mw.Close()
			b.SetBytes(int64(n))
			for b.Loop() {
				key := mw.NextRKey()
				err := p.b.PostSend([]SendWR{{ID: 1, Bind: mw, MR: src, Length: uint32(n), RKey: key, Signaled: true}})
				if err != nil {
					b.Fatal(err)
				}
				pollN(b, p.bcq, 1)
				if err := p.b.PostSend([]SendWR{{ID: 2, Invalidate: true, RKey: key, Signaled: true}}); err != nil {
					b.Fatal(err)
				}
				if wc := pollN(b, p.bcq, 1)[0]; wc.Status != WCSuccess {
					b.Fatalf("invalidation: %v", wc.Status)
				}
			}
		})
	}
}

// BenchmarkRegisterLocal is what a rendezvous receiver's read buffer costs
// registered per transfer (before the read pool): mmap, ibv_reg_mr
// local-only, the pages touched (the read writes them), ibv_dereg_mr,
// munmap.
func BenchmarkRegisterLocal(b *testing.B) {
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
				mr, err := pd.Register(n)
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
