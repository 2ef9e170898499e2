package advancedtls_test

import (
	"net"
	"os"
	"testing"

	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
)

// TestMutualTLSReloadsFilesOverRDMA is TestMutualTLSReloadsFiles over
// rdma://, in the Soft-RoCE guest (testbed/README.md): the handshake runs
// on the bootstrap connection and the rdma transport binds its queue pair
// to that TLS session, as it does with credentials.NewTLS.
func TestMutualTLSReloadsFilesOverRDMA(t *testing.T) {
	if os.Getenv("RDMARPC_TEST_DEV") == "" {
		t.Skip("no RDMA device here (RDMARPC_TEST_DEV unset): this test runs in the Soft-RoCE guest, see testbed/README.md")
	}
	ip := os.Getenv("RDMARPC_TEST_IP")
	if net.ParseIP(ip) == nil {
		t.Fatalf("RDMARPC_TEST_IP=%q is not an IP", ip)
	}
	mutualTLSReloadsFiles(t, "rdma", ip)
}
