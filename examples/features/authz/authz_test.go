package authz

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/testcert"
	"github.com/rdmarpc/rdmarpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAuthz: the user with the role gets its echo; one without it is
// refused PermissionDenied by the policy, one with no known token
// Unauthenticated before the policy is asked.
func TestAuthz(t *testing.T) {
	f := testcert.Write(t)
	server := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0", "--cert", f.ServerCert, "--key", f.ServerKey)[0]
	call := func(token string) (string, error) {
		var out bytes.Buffer
		err := Client(context.Background(), []string{"--addr", server, "--ca", f.CA, "--token", token}, &out)
		return out.String(), err
	}
	out, err := call("super-user-token")
	if err != nil {
		t.Fatal(err)
	}
	if want := "UnaryEcho: hello world\n"; out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	if _, err := call("bad-actor-token"); status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != "authz: unauthorized RPC request rejected" {
		t.Errorf("bad actor: %v, want PermissionDenied", err)
	}
	if _, err := call("nobody"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("unknown token: %v, want Unauthenticated", err)
	}
}
