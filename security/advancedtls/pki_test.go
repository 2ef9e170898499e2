package advancedtls_test

import (
	"net"
	"os"
	"testing"

	"github.com/rdmarpc/rdmarpc/internal/testpki"
)

// issue makes a certificate of c for cn valid for 127.0.0.1 (and the
// guest's address in the Soft-RoCE guest), a client's when client.
func issue(t testing.TB, c *testpki.CA, cn string, client bool) *testpki.Leaf {
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	if ip := net.ParseIP(os.Getenv("RDMARPC_TEST_IP")); ip != nil {
		ips = append(ips, ip)
	}
	return c.Issue(t, testpki.LeafOpts{CN: cn, DNSNames: []string{cn}, IPs: ips, Client: client})
}
