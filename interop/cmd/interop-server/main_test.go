package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The command serves every case over tcp://, and stops when its context
// ends.
func TestServe(t *testing.T) {
	serveAndRun(t, []string{"--port", "0"}, "tcp://127.0.0.1:")
}

// TestServeRDMA: the same over rdma:// in the Soft-RoCE guest
// (testbed/README.md); elsewhere it skips.
func TestServeRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if os.Getenv("RDMARPC_TEST_DEV") == "" || net.ParseIP(ip) == nil {
		t.Skip("no RDMA device here (RDMARPC_TEST_DEV, RDMARPC_TEST_IP unset): this test runs in the Soft-RoCE guest")
	}
	serveAndRun(t, []string{"--transport", "rdma", "--host", ip, "--port", "0"}, "rdma://"+ip+":")
}

// serveAndRun runs the command with args, reads the target it prints
// (which must start with want), runs every case against it, and stops it.
func serveAndRun(t *testing.T, args []string, want string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	go io.Copy(io.Discard, pr)
	target, ok := strings.CutPrefix(strings.TrimSpace(line), "serving on ")
	if !ok || !strings.HasPrefix(target, want) {
		t.Fatalf("printed %q, want serving on %sport", line, want)
	}

	dctx, dcancel := context.WithTimeout(ctx, time.Minute)
	defer dcancel()
	cc, err := rpc.Dial(dctx, target)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range interop.Names {
		if err := interop.Cases[n](dctx, cc); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	cc.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after its context ended: %v", err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--transport", "udp"}, {"--use_tls"}, {"extra"}, {"--nope"}} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run %q succeeded", args)
		}
	}
}
