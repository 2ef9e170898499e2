package wait_for_ready

import (
	"context"
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWaitForReady(t *testing.T) {
	// A port nobody listens on until the server part starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	l.Close()

	var out cli.Output
	waiting := out.When("waiting for the server")
	done := make(chan error, 1)
	go func() { done <- Client(context.Background(), []string{"--addr", addr}, &out) }()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("client ended before waiting: %v\n%s", err, out.String())
	}
	cli.StartServer(t, Server, 1, "--addr", addr)
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := "call without WaitForReady: Unavailable\n" +
		"call with WaitForReady: waiting for the server\n" +
		"call with WaitForReady: Hi!\n"
	if out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
}
