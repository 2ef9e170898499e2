package rdma

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/resolver/dns"
	"github.com/rdmarpc/rdmarpc/resolver/dns/dnstest"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The guest's extra networks for TestEndpointsAcrossNetworks: a second
// Soft-RoCE device over a dummy interface, and a plain interface with no
// RDMA device, the "eth0 that DNS returns" of a Kubernetes pod whose RDMA
// NIC is net1.
const (
	secondNetdev = "rdmanet1"
	secondDev    = "rxe1"
	secondIP     = "10.9.10.1"
	plainNetdev  = "rdmanet2"
	plainIP      = "10.9.11.1"
)

// secondNetworks adds them (the test bed's guest runs tests as root, with
// iproute2 and rdma in PATH) and removes them when the test ends.
func secondNetworks(t *testing.T) {
	t.Helper()
	if os.Getenv("ROLE") != "single" {
		t.Skip("needs the one-guest test bed (ROLE=single): it adds network interfaces and an rxe device")
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip := "/usr/sbin/ip"
	t.Cleanup(func() {
		for _, args := range [][]string{{"rdma", "link", "delete", secondDev}, {ip, "link", "del", secondNetdev}, {ip, "link", "del", plainNetdev}} {
			if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Logf("cleanup: %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
	})
	for _, nd := range []struct{ name, ip string }{{secondNetdev, secondIP}, {plainNetdev, plainIP}} {
		run(ip, "link", "add", nd.name, "type", "dummy")
		run(ip, "addr", "add", nd.ip+"/24", "dev", nd.name)
		run(ip, "link", "set", nd.name, "up")
	}
	run("rdma", "link", "add", secondDev, "type", "rxe", "netdev", secondNetdev)
	// rxe publishes the RoCE v2 GID of the address a moment later.
	for i := 0; ; i++ {
		_, err := rdmadev.ForIP(net.ParseIP(secondIP))
		if err == nil {
			break
		}
		if i == 300 {
			t.Fatalf("%s never served %s: %v", secondDev, secondIP, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := rdmadev.ForIP(net.ParseIP(plainIP)); err == nil {
		t.Fatalf("%s has an RDMA device", plainIP)
	}
}

// sentPkts reads the packets a device's port sent (rxe's hw counter).
func sentPkts(t *testing.T, dev string) uint64 {
	t.Helper()
	c, err := rdmadev.Counters(dev, 1)
	if err != nil {
		t.Fatal(err)
	}
	n, ok := c["sent_pkts"]
	if !ok {
		t.Fatalf("%s has no sent_pkts counter: %v", dev, c)
	}
	return n
}

// TestEndpointsAcrossNetworks (issue 26 items 2 and 3), in one guest with
// two Soft-RoCE devices (rxe0 on dummy0, rxe1 on rdmanet1) and a plain
// interface (rdmanet2) that no RDMA device serves:
//   - a server listening on the plain address serves RDMA: the bootstrap
//     arrives there and the server names its endpoints; rdma+dns:/// and
//     auto+dns:/// targets whose DNS answer is the plain address (the
//     repo's DNS test server) connect over RDMA, where before the client
//     found no device for the address (auto fell back to TCP, and a TCP
//     connection to an RDMA listener could not work);
//   - connections of one client spread over both devices: both carry
//     traffic (rxe's sent_pkts) and the per-device counters see both.
func TestEndpointsAcrossNetworks(t *testing.T) {
	guestIP(t)
	secondNetworks(t)

	srvTr := New(Options{})
	lis, err := srvTr.Listen(net.JoinHostPort(plainIP, "0"))
	if err != nil {
		t.Fatalf("listen on the plain address: %v", err)
	}
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, slowEcho{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()
	_, port, _ := net.SplitHostPort(lis.Addr().String())

	ns, err := dnstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ns.Set("svc.test", netip.MustParseAddr(plainIP))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rx0, rx1 := sentPkts(t, "rxe0"), sentPkts(t, secondDev)
	for _, scheme := range []string{"rdma+dns", "auto+dns"} {
		t.Run(scheme, func(t *testing.T) {
			// The registered rdma transport, as the target names it.
			reg, _ := transport.Lookup("rdma")
			before := reg.(*Transport).Counters()
			target := fmt.Sprintf("%s://%s/svc.test:%s", scheme, ns.Addr(), port)
			cc, err := rpc.NewClient(target, rpc.WithResolvers(dns.NewBuilder(dns.Options{})))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			c := testpb.NewTestClient(cc)
			start := time.Now()
			for i := range 20 {
				payload := []byte(fmt.Sprintf("%s call %d", scheme, i))
				resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: payload})
				if err != nil || string(resp.Payload) != string(payload) {
					t.Fatalf("call %d: %v", i, err)
				}
				if i == 0 {
					t.Logf("first call (resolve, dial, call) took %v", time.Since(start))
				}
			}
			// The calls went over an RDMA connection: a fallback to TCP
			// would have dialed the tcp transport (and found an RDMA
			// listener).
			after := reg.(*Transport).Counters()
			if after["conns_opened"] == before["conns_opened"] || after["messages_sent"]-before["messages_sent"] < 20 {
				t.Fatalf("client rdma counters before %v, after %v", before, after)
			}
			if ns.Queries("svc.test") == 0 {
				t.Fatal("the DNS server was never asked")
			}
		})
	}

	// Several connections of one client: they take the server's two
	// endpoints in turn, each from the local device that reaches it.
	cliTr := New(Options{})
	var conns []transport.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	accepted := make(chan struct{})
	lis2, err := srvTr.Listen(net.JoinHostPort(plainIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis2.Close()
	go func() {
		defer close(accepted)
		for {
			c, err := lis2.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					b, err := c.Recv(ctx)
					if err != nil {
						return
					}
					err = c.Send(ctx, b.Bytes())
					b.Release()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	for i := range 4 {
		c, err := cliTr.Dial(ctx, lis2.Addr().String())
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		for j := range 10 {
			if err := c.Send(ctx, []byte("ping")); err != nil {
				t.Fatalf("conn %d send %d: %v", i, j, err)
			}
			b, err := c.Recv(ctx)
			if err != nil {
				t.Fatalf("conn %d recv %d: %v", i, j, err)
			}
			b.Release()
		}
	}
	got := cliTr.Counters()
	t.Logf("client: conns_opened_rxe0=%d conns_opened_%s=%d", got["conns_opened_rxe0"], secondDev, got["conns_opened_"+secondDev])
	if got["conns_opened_rxe0"] != 2 || got["conns_opened_"+secondDev] != 2 {
		t.Errorf("4 connections over the two devices: %v", got)
	}
	srvGot := srvTr.Counters()
	if srvGot["conns_opened_rxe0"] < 2 || srvGot["conns_opened_"+secondDev] < 2 {
		t.Errorf("server per-device counters: %v", srvGot)
	}
	d0, d1 := sentPkts(t, "rxe0")-rx0, sentPkts(t, secondDev)-rx1
	t.Logf("packets sent since the start: rxe0 %d, %s %d", d0, secondDev, d1)
	if d0 == 0 || d1 == 0 {
		t.Errorf("a device carried no traffic: rxe0 %d, %s %d packets", d0, secondDev, d1)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	lis2.Close()
	<-accepted
}

// plainTwin is the address on the plain network that matches a test-bed
// address: 10.9.9.N -> 10.9.13.N.
func plainTwin(t *testing.T, ip string) string {
	t.Helper()
	a := net.ParseIP(ip).To4()
	if a == nil {
		t.Fatalf("%q is not an IPv4 address", ip)
	}
	return fmt.Sprintf("10.9.13.%d", a[3])
}

// TestTwoHostsPlainNetwork (issue 26 item 2) runs in the two-guest test
// bed. Each guest adds a plain address (10.9.13.N on a dummy interface: no
// RDMA device serves it) and a route to the other guest's plain address
// through the wire, so a bootstrap between plain addresses is a TCP
// connection between two interfaces without RDMA, as between two pods'
// eth0 in Kubernetes. The server listens on its plain address; the client
// resolves rdma+dns:/// and auto+dns:/// targets through the repo's DNS test
// server, which answers the plain address, and calls Echo: the queue pairs
// run over rxe0 on the wire (10.9.9.N), the endpoint the server names.
func TestTwoHostsPlainNetwork(t *testing.T) {
	ip := guestIP(t)
	role, peer := os.Getenv("ROLE"), os.Getenv("PEER_IP")
	if role != "server" && role != "client" {
		t.Skip("runs in the test bed's two-guest mode (ROLE=server|client)")
	}
	own, peerPlain := plainTwin(t, ip), plainTwin(t, peer)
	ipCmd := "/usr/sbin/ip"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command(ipCmd, "route", "del", peerPlain+"/32").Run()
		_ = exec.Command(ipCmd, "link", "del", plainNetdev).Run()
	})
	run(ipCmd, "link", "add", plainNetdev, "type", "dummy")
	run(ipCmd, "addr", "add", own+"/32", "dev", plainNetdev)
	run(ipCmd, "link", "set", plainNetdev, "up")
	run(ipCmd, "route", "add", peerPlain+"/32", "via", peer, "src", own)
	if _, err := rdmadev.ForIP(net.ParseIP(own)); err == nil {
		t.Fatalf("%s has an RDMA device", own)
	}
	const port = "7472"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if role == "server" {
		tr := New(Options{})
		lis, err := tr.Listen(net.JoinHostPort(own, port))
		if err != nil {
			t.Fatalf("listen on the plain address: %v", err)
		}
		serveUntilQuit(t, ctx, lis)
		got := tr.Counters()
		t.Logf("server: conns_opened_rxe0=%d", got["conns_opened_rxe0"])
		if got["conns_opened_rxe0"] < 2 {
			t.Errorf("server counters: %v, want at least 2 connections on rxe0", got)
		}
		return
	}

	ns, err := dnstest.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ns.Set("svc.test", netip.MustParseAddr(peerPlain))
	reg, _ := transport.Lookup("rdma")
	var last *rpc.ClientConn
	for _, scheme := range []string{"rdma+dns", "auto+dns"} {
		before := reg.(*Transport).Counters()
		cc, err := rpc.NewClient(fmt.Sprintf("%s://%s/svc.test:%s", scheme, ns.Addr(), port), rpc.WithResolvers(dns.NewBuilder(dns.Options{})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		c := testpb.NewTestClient(cc)
		start := time.Now()
		// The server guest may not listen yet: call until it answers
		// (bounded by ctx).
		untilServed(t, ctx, scheme, func() error {
			_, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte("first")})
			return err
		})
		t.Logf("%s: first call answered after %v", scheme, time.Since(start))
		for i := range 20 {
			payload := []byte(fmt.Sprintf("%s call %d", scheme, i))
			resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: payload})
			if err != nil || string(resp.Payload) != string(payload) {
				t.Fatalf("%s call %d: %v", scheme, i, err)
			}
		}
		after := reg.(*Transport).Counters()
		if after["conns_opened_rxe0"] == before["conns_opened_rxe0"] || after["messages_sent"]-before["messages_sent"] < 20 {
			t.Fatalf("%s: rdma counters before %v, after %v: the calls did not go over rxe0", scheme, before, after)
		}
		last = cc
	}
	if _, err := testpb.NewTestClient(last).Fail(ctx, &testpb.FailRequest{}); err != nil {
		t.Fatalf("telling the server to stop: %v", err)
	}
}
