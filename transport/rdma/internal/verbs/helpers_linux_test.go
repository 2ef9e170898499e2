//go:build linux && cgo

package verbs

import (
	"bytes"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// The tests in *_linux_test.go run on a real device: the Soft-RoCE guest of
// the test bed sets these.
const (
	envDev      = "RDMARPC_TEST_DEV"       // device name, "rxe0"
	envGIDIndex = "RDMARPC_TEST_GID_INDEX" // the RoCE v2 GID index of envIP
	envIP       = "RDMARPC_TEST_IP"        // the IPv4 address rxe runs over
)

type testEnv struct {
	dev      string
	gidIndex int
	ip       net.IP // nil if not given
}

// needDevice skips the test unless a real RDMA device was named.
func needDevice(t testing.TB) testEnv {
	t.Helper()
	dev := os.Getenv(envDev)
	if dev == "" {
		t.Skipf("%s not set: this test needs a real RDMA device (it runs in the Soft-RoCE guest of testbed/)", envDev)
	}
	e := testEnv{dev: dev}
	s := os.Getenv(envGIDIndex)
	i, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: want the RoCE v2 GID index of the test device: %v", envGIDIndex, s, err)
	}
	e.gidIndex = i
	if s := os.Getenv(envIP); s != "" {
		if e.ip = net.ParseIP(s); e.ip == nil {
			t.Fatalf("%s=%q is not an IP address", envIP, s)
		}
	}
	return e
}

// closeLater registers Close to run at the end of the test (cleanups run in
// reverse order, which is the order verbs objects must be closed in).
func closeLater(t testing.TB, what string, c interface{ Close() error }) {
	t.Helper()
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close %s: %v", what, err)
		}
	})
}

func openTest(t testing.TB) (*Context, testEnv) {
	t.Helper()
	e := needDevice(t)
	ctx, err := Open(e.dev)
	if err != nil {
		t.Fatalf("Open(%q): %v", e.dev, err)
	}
	closeLater(t, "context", ctx)
	return ctx, e
}

// pair is two RC QPs on the one test device, each with its own CQ (for
// sends and receives), sharing a PD and one MR: a's sends land in b's
// receives and the other way round.
type pair struct {
	env      testEnv
	ctx      *Context
	pd       *PD
	mr       *MR
	acq, bcq *CQ
	a, b     *QP
	mtu      int
	gid      GID
}

type pairOpts struct {
	ch       *CompChannel // completion channel for both CQs (optional)
	mrSize   int
	inline   int
	maxSend  int
	maxRecv  int
	noAccept bool // leave both QPs in RESET
	read     bool // QPConfig.RemoteRead on both
}

func newPair(t testing.TB, ctx *Context, e testEnv, o pairOpts) *pair {
	t.Helper()
	if o.mrSize == 0 {
		o.mrSize = 1 << 16
	}
	if o.maxSend == 0 {
		o.maxSend = 64
	}
	if o.maxRecv == 0 {
		o.maxRecv = 64
	}
	p := &pair{env: e, ctx: ctx}
	pa, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	p.mtu = pa.ActiveMTU
	if p.gid, err = ctx.QueryGID(1, e.gidIndex); err != nil {
		t.Fatal(err)
	}
	if p.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	closeLater(t, "PD", p.pd)
	if p.mr, err = p.pd.Register(o.mrSize); err != nil {
		t.Fatal(err)
	}
	closeLater(t, "MR", p.mr)
	if p.acq, err = ctx.CreateCQ(2*(o.maxSend+o.maxRecv), o.ch); err != nil {
		t.Fatal(err)
	}
	closeLater(t, "CQ a", p.acq)
	if p.bcq, err = ctx.CreateCQ(2*(o.maxSend+o.maxRecv), o.ch); err != nil {
		t.Fatal(err)
	}
	closeLater(t, "CQ b", p.bcq)
	cfg := func(cq *CQ) QPConfig {
		return QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: o.maxSend, MaxRecvWR: o.maxRecv, MaxInlineData: o.inline, RemoteRead: o.read}
	}
	if p.a, err = p.pd.CreateQP(cfg(p.acq)); err != nil {
		t.Fatal(err)
	}
	closeLater(t, "QP a", p.a)
	if p.b, err = p.pd.CreateQP(cfg(p.bcq)); err != nil {
		t.Fatal(err)
	}
	closeLater(t, "QP b", p.b)
	if o.noAccept {
		return p
	}
	for _, q := range []*QP{p.a, p.b} {
		if err := q.ToInit(1); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// connect brings both QPs from INIT to RTS, each addressed to the other.
// Post the receives the test needs before calling it.
func (p *pair) connect(t testing.TB) {
	t.Helper()
	for _, qs := range [][2]*QP{{p.a, p.b}, {p.b, p.a}} {
		q, peer := qs[0], qs[1]
		err := q.ToRTR(RTRAttr{
			DestQPN: peer.Num(), RQPSN: peer.Num() & 0xffffff, PathMTU: p.mtu,
			DGID: p.gid, SGIDIndex: uint8(p.env.gidIndex), MinRNRTimer: 1,
		})
		if err != nil {
			t.Fatalf("QP %d ToRTR: %v", q.Num(), err)
		}
		if err := q.ToRTS(RTSAttr{SQPSN: q.Num() & 0xffffff, Timeout: 14, RetryCount: 7}); err != nil {
			t.Fatalf("QP %d ToRTS: %v", q.Num(), err)
		}
	}
}

// pollN polls cq until it has returned n completions, failing the test
// after a generous deadline (rxe under emulation is slow, not lossy).
func pollN(t testing.TB, cq *CQ, n int) []WorkCompletion {
	t.Helper()
	out := make([]WorkCompletion, 0, n)
	buf := make([]WorkCompletion, 16)
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions after 30s: %+v", len(out), n, out)
			}
			runtime.Gosched()
		}
	}
	return out
}

// expectEmpty checks that cq has no completion now.
func expectEmpty(t testing.TB, cq *CQ, why string) {
	t.Helper()
	var wc [4]WorkCompletion
	n, err := cq.Poll(wc[:])
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%s: unexpected completions %+v", why, wc[:n])
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func sameBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s: payload differs (got %d bytes, want %d)", what, len(got), len(want))
	}
}
