//go:build linux && cgo

package selftest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Ports the tests use between the two guests (and within one).
const (
	exchangePort   = 18500 // TestPeerExchange
	rendezvousPort = 18501 // TestRoCEPingPong: "the RoCE server is listening"
	pingPongPort   = 18502 // ibv_rc_pingpong's own TCP bootstrap
)

// bed is the environment the test-bed guest exports (see testbed/guest-init.sh).
type bed struct {
	dev      string // RDMARPC_TEST_DEV, e.g. rxe0
	ip       string // RDMARPC_TEST_IP: this guest's address, the one rxe0's GID is for
	gidIndex int    // RDMARPC_TEST_GID_INDEX: the RoCE v2 entry for ip
	role     string // ROLE: single, server or client
	peer     string // PEER_IP: the other guest (server and client roles only)
}

func testBed(t *testing.T) bed {
	t.Helper()
	b := bed{
		dev:  os.Getenv("RDMARPC_TEST_DEV"),
		ip:   os.Getenv("RDMARPC_TEST_IP"),
		role: os.Getenv("ROLE"),
		peer: os.Getenv("PEER_IP"),
	}
	if b.dev == "" {
		t.Skip("RDMARPC_TEST_DEV unset: not inside the Soft-RoCE test bed (run testbed/run-tests.sh)")
	}
	var err error
	if b.gidIndex, err = strconv.Atoi(os.Getenv("RDMARPC_TEST_GID_INDEX")); err != nil {
		t.Fatalf("RDMARPC_TEST_GID_INDEX: %v", err)
	}
	if net.ParseIP(b.ip).To4() == nil {
		t.Fatalf("RDMARPC_TEST_IP=%q is not an IPv4 address", b.ip)
	}
	switch b.role {
	case "single":
	case "server", "client":
		if net.ParseIP(b.peer) == nil {
			t.Fatalf("ROLE=%s but PEER_IP=%q is not an address", b.role, b.peer)
		}
	default:
		t.Fatalf("ROLE=%q: want single, server or client", b.role)
	}
	return b
}

// twoVM skips unless the test runs on one side of a two-guest pair.
func twoVM(t *testing.T) bed {
	t.Helper()
	b := testBed(t)
	if b.role == "single" {
		t.Skip("ROLE=single: needs the two-VM bed (run2)")
	}
	return b
}

// testContext ends a little before the test binary's -test.timeout, so a stuck peer fails
// the test with a message instead of a panic.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	if d, ok := t.Deadline(); ok {
		cancel()
		ctx, cancel = context.WithDeadline(t.Context(), d.Add(-5*time.Second))
	}
	t.Cleanup(cancel)
	return ctx
}

func TestDevice(t *testing.T) {
	b := testBed(t)
	p, err := probeDevice(b.dev, 1, b.gidIndex)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: max_qp=%d port state=%d active_mtu=%d gid[%d]=%s lkey=%#x cqe=%d",
		b.dev, p.MaxQP, p.PortState, p.ActiveMTU, b.gidIndex, p.GID, p.LKey, p.CQE)
	if p.PortState != portActive {
		t.Errorf("port 1 state %d, want %d (ACTIVE)", p.PortState, portActive)
	}
	if p.LinkLayer != linkLayerEthernet {
		t.Errorf("link layer %d, want %d (Ethernet: RoCE)", p.LinkLayer, linkLayerEthernet)
	}
	// The RoCE v2 GID of an IPv4 address is the address IPv4-mapped: ::ffff:a.b.c.d.
	if want := net.ParseIP(b.ip).To16(); !p.GID.Equal(want) {
		t.Errorf("gid[%d] = %s, want %s (the RoCE v2 GID of %s)", b.gidIndex, p.GID, want, b.ip)
	}
	if p.CQE < 64 {
		t.Errorf("cq holds %d entries, asked for 64", p.CQE)
	}
}

// rendezvous connects the two roles over TCP: the server accepts one connection on its own
// address, the client dials the peer until the server listens or ctx ends.
func rendezvous(ctx context.Context, t *testing.T, b bed, port int) net.Conn {
	t.Helper()
	if b.role == "server" {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(b.ip, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		c, err := ln.Accept()
		if err != nil {
			t.Fatalf("accept on %s: %v (ctx: %v)", ln.Addr(), err, ctx.Err())
		}
		return c
	}
	addr := net.JoinHostPort(b.peer, strconv.Itoa(port))
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c
		}
		// The server side may not be listening yet: the guests boot independently.
		select {
		case <-ctx.Done():
			t.Fatalf("dial %s: %v", addr, err)
		case <-retry.C:
		}
	}
}

func TestPeerExchange(t *testing.T) {
	b := twoVM(t)
	ctx := testContext(t)
	c := rendezvous(ctx, t, b, exchangePort)
	defer c.Close()
	deadline, _ := ctx.Deadline()
	if err := c.SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	// The client sends a byte, the server answers with its successor.
	var got [1]byte
	if b.role == "client" {
		if _, err := c.Write([]byte{'q'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got[:]); err != nil {
			t.Fatal(err)
		}
		if got[0] != 'r' {
			t.Fatalf("server answered %q, want 'r'", got[0])
		}
	} else {
		if _, err := io.ReadFull(c, got[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte{got[0] + 1}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s %s <-> %s: exchanged a byte over TCP", b.role, c.LocalAddr(), c.RemoteAddr())
}

// hwCounter reads one of the rxe device's port counters from sysfs.
func hwCounter(t *testing.T, dev, name string) uint64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, "ports/1/hw_counters", name))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("counter %s: %v", name, err)
	}
	return v
}

// listening reports whether some socket on this machine listens on TCP port.
func listening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			// sl local_address rem_address st ...; st 0A is LISTEN
			fs := strings.Fields(sc.Text())
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// startPingPongServer starts ibv_rc_pingpong's server side and returns once its TCP
// bootstrap socket listens, so a client started afterwards cannot find it absent.
func startPingPongServer(ctx context.Context, t *testing.T, tool string, args []string) (wait func() (string, error)) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	wait = func() (string, error) { err := <-exited; return out.String(), err }
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for !listening(pingPongPort) {
		select {
		case err := <-exited:
			t.Fatalf("ibv_rc_pingpong server exited before listening: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("ibv_rc_pingpong server not listening on %d: %v", pingPongPort, ctx.Err())
		case <-poll.C:
		}
	}
	return wait
}

// TestRoCEPingPong runs rdma-core's ibv_rc_pingpong (an RC QP, Send/Recv) between the roles
// (two guests, or a server and a client on one rxe device) and checks that rxe0 received
// the RoCE packets: in two-VM mode they crossed the wire between two kernels.
func TestRoCEPingPong(t *testing.T) {
	b := testBed(t)
	tool, err := exec.LookPath("ibv_rc_pingpong")
	if err != nil {
		t.Skip("ibv_rc_pingpong not installed")
	}
	const iters = 500
	ctx := testContext(t)
	args := []string{"-d", b.dev, "-g", strconv.Itoa(b.gidIndex), "-p", strconv.Itoa(pingPongPort),
		"-n", strconv.Itoa(iters), "-s", "64"}
	before := hwCounter(t, b.dev, "rcvd_pkts")

	client := func(server string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, tool, append(args, server)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ibv_rc_pingpong client: %v\n%s", err, out)
		}
		t.Logf("client: %s", strings.TrimSpace(string(out)))
	}
	serverDone := func(wait func() (string, error)) {
		t.Helper()
		out, err := wait()
		if err != nil {
			t.Fatalf("ibv_rc_pingpong server: %v\n%s", err, out)
		}
		t.Logf("server: %s", strings.TrimSpace(out))
	}

	switch b.role {
	case "single":
		wait := startPingPongServer(ctx, t, tool, args)
		client(b.ip)
		serverDone(wait)
	case "server":
		wait := startPingPongServer(ctx, t, tool, args)
		c := rendezvous(ctx, t, b, rendezvousPort)
		_, err := c.Write([]byte{1}) // "listening": the client may start now
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		serverDone(wait)
	case "client":
		c := rendezvous(ctx, t, b, rendezvousPort)
		deadline, _ := ctx.Deadline()
		c.SetDeadline(deadline)
		var ready [1]byte
		_, err := io.ReadFull(c, ready[:])
		c.Close()
		if err != nil {
			t.Fatalf("waiting for the server to listen: %v", err)
		}
		client(b.peer)
	}

	got := hwCounter(t, b.dev, "rcvd_pkts") - before
	t.Logf("%s rcvd_pkts +%d", b.dev, got)
	if got < iters {
		t.Errorf("%s received %d RoCE packets during %d round trips, want at least %d", b.dev, got, iters, iters)
	}
}
