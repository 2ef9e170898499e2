package kvtest

import (
	"net"
	"os"
	"testing"

	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// TestTCP runs the suite over the TCP transport.
func TestTCP(t *testing.T) {
	Run(t, Config{Transport: tcp.New(tcp.Options{}), Addr: "127.0.0.1:0"})
}

// TestRDMA runs the suite over rdma://$RDMARPC_TEST_IP, as the Soft-RoCE
// test bed sets it; elsewhere it skips.
func TestRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if ip == "" {
		t.Skip("RDMARPC_TEST_IP is not set: no RDMA device to test on")
	}
	tr, ok := transport.Lookup("rdma")
	if !ok {
		t.Skip("RDMARPC_TEST_IP is set but this binary has no RDMA transport: link transport/rdma in")
	}
	Run(t, Config{Transport: tr, Addr: net.JoinHostPort(ip, "0")})
}
