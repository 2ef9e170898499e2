package keepalive

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKeepalive: a client pinging far more often than the server's
// enforcement policy allows is sent GOAWAY too_many_pings, and says so.
func TestKeepalive(t *testing.T) {
	server := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0", "--min-time", "1h")[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out cli.Output
	told := out.When("too_many_pings")
	done := make(chan error, 1)
	go func() { done <- Client(ctx, []string{"--addr", server, "--time", "1ms"}, &out) }()
	select {
	case <-told:
	case err := <-done:
		t.Fatalf("client ended: %v\n%s", err, out.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "UnaryEcho: keepalive demo\n") {
		t.Fatalf("output:\n%s", out.String())
	}
}
