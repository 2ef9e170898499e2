package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Ports between the two guests: the server's rdma:// listener, and a TCP
// rendezvous (listened on once the server serves; the client closes it
// when it is done).
const (
	rdmaPort       = 18610
	rendezvousPort = 18611
)

// TestTwoHosts runs the command's every case over rdma:// from one
// Soft-RoCE guest to a server in the other (testbed 2vm: ROLE=server or
// client, PEER_IP the other side); elsewhere it skips.
func TestTwoHosts(t *testing.T) {
	role, ip, peer := os.Getenv("ROLE"), os.Getenv("RDMARPC_TEST_IP"), os.Getenv("PEER_IP")
	if os.Getenv("RDMARPC_TEST_DEV") == "" || (role != "server" && role != "client") {
		t.Skip("needs the two-guest Soft-RoCE bed (ROLE=server or client, testbed/README.md)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if role == "server" {
		serveUntilDone(ctx, t, ip)
		return
	}
	c := dialRendezvous(ctx, t, net.JoinHostPort(peer, strconv.Itoa(rendezvousPort)))
	defer c.Close()
	var out bytes.Buffer
	err := run(ctx, []string{"--transport", "rdma", "--server_host", peer, "--server_port", strconv.Itoa(rdmaPort), "--test_case", "all"}, &out)
	t.Logf("interop-client --transport rdma --server_host %s --server_port %d --test_case all:\n%s", peer, rdmaPort, out.String())
	if err != nil {
		t.Fatal(err)
	}
}

// serveUntilDone serves TestService on rdma://ip until the client closes
// the rendezvous connection.
func serveUntilDone(ctx context.Context, t *testing.T, ip string) {
	lis, err := transport.Listen("rdma://" + net.JoinHostPort(ip, strconv.Itoa(rdmaPort)))
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer()
	grpc_testing.RegisterTestServiceServer(s, interop.NewTestServer(interop.ServerOptions{}))
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	defer func() {
		s.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(rendezvousPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("no client came: %v", err)
	}
	defer c.Close()
	stopRead := context.AfterFunc(ctx, func() { c.Close() })
	defer stopRead()
	io.Copy(io.Discard, c) // until the client is done
	if ctx.Err() != nil {
		t.Fatal("the client did not finish")
	}
}

// dialRendezvous dials the server's rendezvous until it listens (the
// guests start together, not their listeners) or ctx ends.
func dialRendezvous(ctx context.Context, t *testing.T, addr string) net.Conn {
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dial %s: %v", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
