//go:build linux && cgo

package verbs

import (
	"testing"
)

// TestRDMARead: a reads a region b registered with RegisterRemoteRead, by
// its address and rkey; a read past the region's end, or one after b
// deregistered it, fails with a remote access error and a completion that
// says so.
func TestRDMARead(t *testing.T) {
	ctx, e := openTest(t)
	const size = 1 << 20
	cases := []struct {
		name  string
		off   uint64 // into the remote region
		n     uint32
		close bool // b deregisters the region before a reads
		want  WCStatus
	}{
		{"whole", 0, size, false, WCSuccess},
		{"part", 4096, 1000, false, WCSuccess},
		{"past the end", size - 10, 20, false, WCRemAccessErr},
		{"deregistered", 0, 4096, true, WCRemAccessErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, ctx, e, pairOpts{mrSize: size, read: true})
			p.connect(t)
			src, err := p.pd.RegisterRemoteRead(size)
			if err != nil {
				t.Fatal(err)
			}
			fill(src.Bytes(), 3)
			want := append([]byte(nil), src.Bytes()[tc.off:tc.off+min(uint64(tc.n), size-tc.off)]...)
			addr, rkey := src.Addr(), src.RKey()
			if rkey == 0 {
				t.Fatal("RegisterRemoteRead's MR has no rkey")
			}
			if tc.close {
				if err := src.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				closeLater(t, "remote-readable MR", src)
			}
			err = p.a.PostSend([]SendWR{{ID: 9, MR: p.mr, Length: tc.n, Read: true, RemoteAddr: addr + tc.off, RKey: rkey, Signaled: true}})
			if err != nil {
				t.Fatal(err)
			}
			wc := pollN(t, p.acq, 1)[0]
			if wc.Status != tc.want {
				t.Fatalf("read completed with %v, want %v", wc.Status, tc.want)
			}
			if tc.want == WCSuccess {
				if wc.Opcode != WCRDMARead {
					t.Errorf("opcode %v, want RDMA read", wc.Opcode)
				}
				sameBytes(t, "read", p.mr.Bytes()[:tc.n], want)
			}
		})
	}
}

// TestRDMAReadRefused: an RDMA Read is refused at post time on a QP made
// without RemoteRead, and a local-only MR reports no rkey.
func TestRDMAReadRefused(t *testing.T) {
	ctx, e := openTest(t)
	p := newPair(t, ctx, e, pairOpts{})
	p.connect(t)
	if k := p.mr.RKey(); k != 0 {
		t.Errorf("a local-only MR reports rkey %#x", k)
	}
	err := p.a.PostSend([]SendWR{{ID: 1, MR: p.mr, Length: 16, Read: true, RemoteAddr: p.mr.Addr(), RKey: 1}})
	if err == nil {
		t.Fatal("an RDMA Read posted on a QP without RemoteRead")
	}
}
