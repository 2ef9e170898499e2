package main

import (
	"bufio"
	"context"
	"io"
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"--port", "0"}, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	go io.Copy(io.Discard, pr)
	target, ok := strings.CutPrefix(strings.TrimSpace(line), "serving on ")
	if !ok || !strings.HasPrefix(target, "tcp://127.0.0.1:") {
		t.Fatalf("printed %q, want serving on tcp://127.0.0.1:port", line)
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
