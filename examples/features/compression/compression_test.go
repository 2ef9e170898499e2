package compression

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCompression(t *testing.T) {
	addrs := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0")
	var out cli.Output
	if err := Client(context.Background(), []string{"--addr", addrs[0]}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if want := "Say call returned \"compress\", <nil>\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
}
