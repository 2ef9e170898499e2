package pipe

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/rpc/rpctest"
	"github.com/rdmarpc/rdmarpc/test/conformance"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	const maxBuffered = 256 << 10
	transporttest.Run(t, transporttest.Config{
		Config:         conformance.Config{Transport: New(Options{MaxBuffered: maxBuffered}), Addr: "conformance:0"},
		MaxBuffered:    maxBuffered,
		MaxMessageSize: transport.DefaultMaxMessageSize,
	})
}

// TestRPC runs the RPC conformance suite over pipes.
func TestRPC(t *testing.T) {
	rpctest.Run(t, rpctest.Config{Transport: New(Options{}), Addr: "rpc:0"})
}

// TestStall: a stalled end takes nothing, though messages keep arriving
// until the bound, and takes everything once unstalled.
func TestStall(t *testing.T) {
	ctx := context.Background()
	tr := New(Options{MaxBuffered: 100})
	lis, err := tr.Listen("stall")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept(ctx)
		if err == nil {
			c.Send(ctx, make([]byte, 60))
			c.Send(ctx, make([]byte, 60)) // blocks until the first is taken
			c.Close()
		}
	}()
	tc, err := tr.Dial(ctx, "stall")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	c := tc.(*Conn)
	c.Stall(true)
	// The first message arrives (bytes counted), the stall holds it.
	for c.BytesReceived() < 60 {
		b, err := c.Recv(ctxDone())
		if err == nil {
			t.Fatalf("stalled Recv returned %d bytes", b.Len())
		}
	}
	c.Stall(false)
	for i := range 2 {
		b, err := c.Recv(ctx)
		if err != nil || b.Len() != 60 {
			t.Fatalf("message %d: %d bytes, %v", i, b.Len(), err)
		}
	}
	if _, err := c.Recv(ctx); err == nil {
		t.Fatal("Recv after the peer closed succeeded")
	}
}

func ctxDone() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestRegistered: the pipe scheme is registered, so a target names a
// listener of Default as a tcp:// target names a socket.
func TestRegistered(t *testing.T) {
	lis, err := transport.Listen("pipe://registered")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := context.Background()
	go func() {
		if c, err := lis.Accept(ctx); err == nil {
			c.Send(ctx, []byte("hi"))
			<-c.Done()
		}
	}()
	c, err := transport.Dial(ctx, "pipe://registered")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.Recv(ctx)
	if err != nil || string(b.Bytes()) != "hi" {
		t.Fatalf("Recv: %q, %v", b.Bytes(), err)
	}
}
