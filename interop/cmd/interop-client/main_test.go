package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server serves TestService over tcp:// (when withService) until the test
// ends and returns its target.
func server(t *testing.T, withService bool) string {
	t.Helper()
	lis, err := transport.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer()
	if withService {
		grpc_testing.RegisterTestServiceServer(s, interop.NewTestServer(interop.ServerOptions{}))
	}
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return "tcp://" + lis.Addr().String()
}

func TestAllPass(t *testing.T) {
	target := server(t, true)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--target", target, "--test_case", "all"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := strings.Count(out.String(), "PASS "); got != len(interop.Names) {
		t.Fatalf("%d PASS lines, want %d:\n%s", got, len(interop.Names), out.String())
	}
}

// The host and port flags make the same target as --target.
func TestHostPort(t *testing.T) {
	target := server(t, true)
	host, port, _ := strings.Cut(strings.TrimPrefix(target, "tcp://"), ":")
	var out bytes.Buffer
	err := run(context.Background(), []string{"--server_host", host, "--server_port", port, "--test_case", "empty_unary,ping_pong"}, &out)
	if err != nil || out.String() != "PASS empty_unary\nPASS ping_pong\n" {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
}

// Against a server without TestService the cases that call it fail, each
// with its line, the others still run, and run says some failed.
func TestFailuresReported(t *testing.T) {
	target := server(t, false)
	var out bytes.Buffer
	err := run(context.Background(), []string{"--target", target, "--test_case", "empty_unary,unimplemented_method,ping_pong"}, &out)
	if !errors.Is(err, errFailed) {
		t.Fatalf("run: %v, want errFailed", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "FAIL empty_unary: ") || lines[1] != "PASS unimplemented_method" || !strings.HasPrefix(lines[2], "FAIL ping_pong: ") {
		t.Fatalf("printed:\n%s", out.String())
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--test_case", "nope"}, {"--transport", "udp"}, {"--use_tls"}, {"extra"}} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run %q succeeded", args)
		}
	}
}
