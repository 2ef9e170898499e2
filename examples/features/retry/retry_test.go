package retry

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRetry(t *testing.T) {
	server := cli.StartServer(t, Server, 1, "--addr", "tcp://127.0.0.1:0", "--fail", "2")[0]
	var out bytes.Buffer
	if err := Client(context.Background(), []string{"--addr", server}, &out); err != nil {
		t.Fatalf("with the retry policy: %v", err)
	}
	if want := "UnaryEcho reply: Try and Success\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	// Without the policy the first attempt's Unavailable is the answer
	// (the server's count is at 3, so the next attempt fails).
	err := Client(context.Background(), []string{"--addr", server, "--no-retry"}, &out)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without the retry policy: %v, want Unavailable", err)
	}
}
