package health

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHealth(t *testing.T) {
	serving := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0", "--toggle", "0")[0]
	sick := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0", "--toggle", "0", "--serving=false")[0]
	var out bytes.Buffer
	if err := Client(context.Background(), []string{"--addr", sick + "," + serving, "--n", "20"}, &out); err != nil {
		t.Fatal(err)
	}
	want := "(from " + strings.TrimPrefix(serving, "tcp://") + ")"
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d answers, want 20:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		if !strings.HasSuffix(l, want) {
			t.Fatalf("answer %q not from the SERVING backend %s:\n%s", l, serving, out.String())
		}
	}
}
