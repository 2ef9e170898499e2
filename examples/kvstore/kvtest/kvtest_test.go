package kvtest

import (
	"net"
	"os"
	"testing"

	"github.com/rdmarpc/rdmarpc/transport/rdma"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// TestTCP runs the suite over the TCP transport.
func TestTCP(t *testing.T) {
	Run(t, Config{Transport: tcp.New(tcp.Options{}), Addr: "127.0.0.1:0"})
}

// TestRDMA runs the suite over rdma://$RDMARPC_TEST_IP, the address of the
// RDMA device the Soft-RoCE test bed sets up (testbed/README.md); elsewhere
// it skips.
func TestRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if ip == "" {
		t.Skip("RDMARPC_TEST_IP is not set: no RDMA device to test on (this test runs in the Soft-RoCE guest)")
	}
	if net.ParseIP(ip) == nil {
		t.Fatalf("RDMARPC_TEST_IP=%q is not an IP", ip)
	}
	Run(t, Config{Transport: rdma.New(rdma.Options{}), Addr: net.JoinHostPort(ip, "0")})
}
