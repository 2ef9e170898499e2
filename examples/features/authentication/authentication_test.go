package authentication

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

func TestAuthentication(t *testing.T) {
	f := testcert.Write(t)
	server := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0", "--cert", f.ServerCert, "--key", f.ServerKey)[0]
	call := func(token string) (string, error) {
		var out bytes.Buffer
		err := Client(context.Background(), []string{"--addr", server, "--ca", f.CA, "--token", token}, &out)
		return out.String(), err
	}
	out, err := call(secretToken)
	if err != nil {
		t.Fatal(err)
	}
	if want := "UnaryEcho: hello world\n"; out != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	for _, token := range []string{"", "a-wrong-token"} {
		_, err := call(token)
		if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != "invalid token" {
			t.Errorf("token %q: %v, want Unauthenticated: invalid token", token, err)
		}
	}
}
