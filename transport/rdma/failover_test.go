package rdma

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

const failoverPort = "7473"

// takeRDMA takes RDMA away from the client guest while TCP to the server
// goes on: the client's address leaves its NIC (with it the RoCE GID its
// queue pairs use: their packets find no route and the server's find no
// host, so they fail), and TCP goes from another address, 10.9.9.3 on lo,
// over the NIC unnumbered, which no RDMA device serves (the probes get
// ErrNoDevice). giveRDMA puts the address back and the route away. A
// policy rule that blackholes UDP did not do it: Soft-RoCE's route lookup
// names its NIC, and the kernel takes the destination as on-link when the
// rules fail it. (`rdma link delete rxe0` waits, on rxe, for every process
// that holds the device open; `ip link set down` takes TCP too, the
// guests having one NIC.)
//
// Deleting a device's last address flushes the routes through it, so the
// route to the peer can only be added after the address went. The three
// commands run in one ip process (-batch), so that a failover dial made at
// once (a work request fails right when the address goes) does not fall
// between them and find no route ("network is unreachable"; one exec
// apart, it did in a full guest suite).
func takeRDMA(ip, peer, dev string) error {
	return ipCmds(
		[]string{"addr", "add", "10.9.9.3/32", "dev", "lo"},
		[]string{"addr", "del", ip + "/24", "dev", dev},
		[]string{"route", "add", peer + "/32", "dev", dev, "src", "10.9.9.3"},
	)
}

func giveRDMA(ip, peer, dev string) error {
	return ipCmds(
		[]string{"route", "del", peer + "/32", "dev", dev},
		[]string{"addr", "add", ip + "/24", "dev", dev},
	)
}

func ipCmds(cmds ...[]string) error {
	var batch strings.Builder
	for _, args := range cmds {
		batch.WriteString(strings.Join(args, " ") + "\n")
	}
	cmd := exec.Command("/usr/sbin/ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -batch %q: %v: %s", batch.String(), err, out)
	}
	return nil
}

// TestFailoverTwoHosts runs in the test bed's two-guest mode. The server
// guest serves Echo on rdma://, whose bootstrap port serves rdmarpc over
// TCP too. The client guest first calls that port over tcp://, then calls
// it over rdma:// with WithFallback("tcp") from 8 callers, takes RDMA
// away (takeRDMA) and gives it back. It checks that the connection
// moved to TCP and back with one log line each way, that only calls in
// flight failed (Unavailable, at most one per caller), and that calls
// succeeded in each phase; it logs the figures: calls per phase, failures,
// the time to notice the failure, the time on TCP, the time from RDMA's
// return to the switch back, and the transport's and device's error
// counters.
func TestFailoverTwoHosts(t *testing.T) {
	ip := guestIP(t)
	role, peer := os.Getenv("ROLE"), os.Getenv("PEER_IP")
	if role != "server" && role != "client" {
		t.Skip("runs in the test bed's two-guest mode (ROLE=server|client)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := deviceCounters(t)
	tr, _ := transport.Lookup("rdma")
	trBefore := tr.(transport.Counters).Counters()
	if role == "server" {
		lis, err := rpc.Listen("rdma://" + net.JoinHostPort(ip, failoverPort))
		if err != nil {
			t.Fatal(err)
		}
		serveUntilQuit(t, ctx, lis, rpc.Logger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
		logCounters(t, "server", before, trBefore, tr)
		if n := tr.(transport.Counters).Counters()["tcp_peers"] - trBefore["tcp_peers"]; n < 2 {
			t.Errorf("the server served %d TCP clients on its RDMA port, want at least 2 (the tcp:// check and the failover)", n)
		}
		return
	}

	target := net.JoinHostPort(peer, failoverPort)
	core, logs := observer.New(zap.DebugLevel)
	log := zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	var cc *rpc.ClientConn
	untilServed(t, ctx, "dial", func() (err error) {
		cc, err = rpc.Dial(ctx, "rdma://"+target, rpc.WithFallback("tcp"), rpc.WithLogger(log))
		return err
	})
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	// Whatever happens, tell the server it may stop.
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Fail(fctx, &testpb.FailRequest{}); err != nil {
			t.Errorf("telling the server to stop: %v", err)
		}
	}()

	// The RDMA listener's port serves a plain tcp:// client.
	tcc, err := rpc.Dial(ctx, "tcp://"+target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testpb.NewTestClient(tcc).Echo(ctx, &testpb.EchoRequest{Payload: []byte("tcp")}); err != nil {
		t.Fatalf("a tcp:// call to the rdma:// listener's port: %v", err)
	}
	tcc.Close()

	const callers = 8
	var (
		phase   atomic.Int32 // 0 RDMA, 1 RDMA taken away, 2 RDMA given back
		ok      [3]atomic.Int64
		mu      sync.Mutex
		failed  = map[string]int{}
		perCall [callers]int
		stop    = make(chan struct{})
		stopped sync.Once
		wg      sync.WaitGroup
	)
	halt := func() {
		stopped.Do(func() { close(stop) })
		wg.Wait()
	}
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 64
				if i%2 == 1 {
					n = 8 << 10 // several packets at rxe's MTU
				}
				p := phase.Load()
				want := stamp(g, i, n)
				resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: want})
				if err == nil && string(resp.Payload) != string(want) {
					err = fmt.Errorf("echo of %d bytes came back different", n)
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					mu.Lock()
					failed[fmt.Sprintf("phase %d: %v", p, status.Code(err))]++
					perCall[g]++
					mu.Unlock()
					t.Logf("caller %d call %d (phase %d) failed: %v", g, i, p, err)
					continue
				}
				ok[p].Add(1)
			}
		}()
	}
	progress := func(what string, p int, n int64) {
		t.Helper()
		start := ok[p].Load()
		for ok[p].Load() < start+n {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: %d calls of %d", what, ok[p].Load()-start, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLog := func(what, snippet string) time.Time {
		t.Helper()
		for logs.FilterMessageSnippet(snippet).Len() == 0 {
			if ctx.Err() != nil {
				t.Fatalf("no log line saying %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return logs.FilterMessageSnippet(snippet).All()[0].Time
	}
	defer halt()

	progress("calls over RDMA", 0, 300)
	tBreak := time.Now()
	phase.Store(1)
	dev := os.Getenv("RDMARPC_TEST_NETDEV")
	if err := takeRDMA(ip, peer, dev); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			if err := giveRDMA(ip, peer, dev); err != nil {
				t.Error(err)
			}
		}
	}()
	tFail := waitLog("the move to TCP", "reconnecting over the fallback")
	progress("calls over TCP", 1, 300)
	// RDMA stays away until a probe found it so (ErrNoDevice: the client's
	// TCP comes from an address no device serves).
	waitLog("a failed probe", "probe of the target's own transport failed")
	probesFailed := logs.FilterMessageSnippet("probe of the target's own transport failed").Len()
	tHeal := time.Now()
	phase.Store(2)
	healed = true
	if err := giveRDMA(ip, peer, dev); err != nil {
		t.Fatal(err)
	}
	tBack := waitLog("the move back to RDMA", "works again")
	rdmaSent := tr.(transport.Counters).Counters()["messages_sent"]
	progress("calls after the move back", 2, 300)
	if tr.(transport.Counters).Counters()["messages_sent"] == rdmaSent {
		t.Error("no message went over RDMA after the move back")
	}
	halt()

	mu.Lock()
	keys := make([]string, 0, len(failed))
	for k := range failed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total := 0
	for _, k := range keys {
		t.Logf("failed calls, %s: %d", k, failed[k])
		total += failed[k]
		// A call counts in the phase it started in: the ones in flight
		// when RDMA went away started in phase 0.
		if !strings.HasSuffix(k, codes.Unavailable.String()) || strings.HasPrefix(k, "phase 2") {
			t.Errorf("failed calls %s: want only Unavailable, and none after RDMA came back", k)
		}
	}
	for g, n := range perCall {
		if n > 1 {
			t.Errorf("caller %d had %d calls fail: only the call in flight may", g, n)
		}
	}
	mu.Unlock()
	t.Logf("calls: %d over RDMA before, %d while RDMA was away, %d after it came back; %d failed (at most one in flight per caller, %d callers)",
		ok[0].Load(), ok[1].Load(), ok[2].Load(), total, callers)
	t.Logf("failure noticed %v after RDMA was taken away; on TCP for %v (%d probes failed while RDMA was away); back on RDMA %v after RDMA came back",
		tFail.Sub(tBreak).Round(time.Millisecond), tBack.Sub(tFail).Round(time.Millisecond), probesFailed, tBack.Sub(tHeal).Round(time.Millisecond))
	for _, s := range []string{"reconnecting over the fallback", "works again"} {
		if n := logs.FilterMessageSnippet(s).Len(); n != 1 {
			t.Errorf("%d log lines %q, want 1", n, s)
		}
	}
	logCounters(t, "client", before, trBefore, tr)
}

// logCounters logs the device's error counters and the transport's
// counters that moved.
func logCounters(t *testing.T, side string, dev, trBefore map[string]uint64, tr transport.Transport) {
	t.Helper()
	after := deviceCounters(t)
	for _, n := range errorCounters {
		t.Logf("%s device %s: +%d", side, n, after[n]-dev[n])
	}
	now := tr.(transport.Counters).Counters()
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "wc_error_") || k == "handshakes_refused" || k == "tcp_peers" || k == "conns_opened" {
			t.Logf("%s transport %s: +%d", side, k, now[k]-trBefore[k])
		}
	}
}
