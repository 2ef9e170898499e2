package features_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/encryption"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/testcert"
	"github.com/rdmarpc/rdmarpc/examples/features/load_balancing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRDMA runs the examples that involve RDMA over rdma://, in the test
// bed's guest (testbed/tests.txt): encryption's TLS on the bootstrap
// connection, and load_balancing over two backends.
func TestRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if ip == "" {
		t.Skip("RDMARPC_TEST_IP is not set: no RDMA device to test on (this test runs in the Soft-RoCE guest)")
	}
	listen := "rdma://" + net.JoinHostPort(ip, "0")
	t.Run("encryption", func(t *testing.T) {
		f := testcert.Write(t)
		server := cli.StartServer(t, encryption.Server, 1, "--addr", listen, "--cert", f.ServerCert, "--key", f.ServerKey, "--client-ca", f.CA)[0]
		if !strings.HasPrefix(server, "rdma://") {
			t.Fatalf("server on %s", server)
		}
		var out bytes.Buffer
		if err := encryption.Client(context.Background(), []string{"--addr", server, "--ca", f.CA, "--cert", f.ClientCert, "--key", f.ClientKey}, &out); err != nil {
			t.Fatal(err)
		}
		if want := "UnaryEcho: hello world (to client client over PrivacyAndIntegrity)\n"; out.String() != want {
			t.Fatalf("output %q, want %q", out.String(), want)
		}
		if err := encryption.Client(context.Background(), []string{"--addr", server, "--ca", f.CA}, &out); err == nil {
			t.Fatal("a client without a certificate was served under mutual TLS")
		}
	})
	t.Run("load_balancing", func(t *testing.T) {
		addrs := cli.StartServer(t, load_balancing.Server, 2, "--addr", listen+","+listen)
		var out bytes.Buffer
		if err := load_balancing.Client(context.Background(), []string{"--addr", strings.Join(addrs, ","), "--n", "10"}, &out); err != nil {
			t.Fatal(err)
		}
		_, rr, _ := strings.Cut(out.String(), "round_robin ---\n")
		for _, a := range addrs {
			if n := strings.Count(rr, "(from "+strings.TrimPrefix(a, "rdma://")+")"); n == 0 {
				t.Errorf("round_robin: %d of 10 answers from %s, want some:\n%s", n, a, out.String())
			}
		}
	})
}
