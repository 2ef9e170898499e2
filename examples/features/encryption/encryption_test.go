package encryption

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/testcert"
	"github.com/rdmarpc/rdmarpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func addr() string { return "tcp://127.0.0.1:0" }

func TestEncryption(t *testing.T) {
	f := testcert.Write(t)
	call := func(t *testing.T, server string, args ...string) (string, error) {
		var out bytes.Buffer
		err := Client(context.Background(), append([]string{"--addr", server}, args...), &out)
		return out.String(), err
	}
	t.Run("TLS", func(t *testing.T) {
		server := cli.StartServer(t, Server, 1, "--addr", addr(), "--cert", f.ServerCert, "--key", f.ServerKey)[0]
		out, err := call(t, server, "--ca", f.CA)
		if err != nil {
			t.Fatal(err)
		}
		if want := "UnaryEcho: hello world (to an anonymous client over PrivacyAndIntegrity)\n"; out != want {
			t.Fatalf("output %q, want %q", out, want)
		}
		// Without the CA the server's certificate is not trusted.
		if _, err := call(t, server); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("without the CA: %v, want Unavailable naming the certificate", err)
		}
	})
	t.Run("mTLS", func(t *testing.T) {
		server := cli.StartServer(t, Server, 1, "--addr", addr(), "--cert", f.ServerCert, "--key", f.ServerKey, "--client-ca", f.CA)[0]
		out, err := call(t, server, "--ca", f.CA, "--cert", f.ClientCert, "--key", f.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		if want := "UnaryEcho: hello world (to client client over PrivacyAndIntegrity)\n"; out != want {
			t.Fatalf("output %q, want %q", out, want)
		}
		// Without a client certificate the server refuses the handshake.
		if _, err := call(t, server, "--ca", f.CA); status.Code(err) != codes.Unavailable {
			t.Fatalf("without a client certificate: %v, want Unavailable", err)
		}
	})
}
