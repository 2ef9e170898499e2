package rdma

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// TestFallbackToTCP: no RDMA device serves 127.0.0.1 (loopback, here or in
// the guest), so listening and dialing rdma://127.0.0.1 fall back to TCP
// when asked to, with one log line each, and fail with ErrNoDevice (and
// Unavailable) when not.
func TestFallbackToTCP(t *testing.T) {
	if _, err := transport.Listen("rdma://127.0.0.1:0"); !errors.Is(err, transport.ErrNoDevice) {
		t.Fatalf("rdma listen on loopback: %v, want ErrNoDevice", err)
	}
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	lis, err := rpc.Listen("rdma://127.0.0.1:0", rpc.ListenFallback("tcp"), rpc.ListenLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, slowEcho{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target := "rdma://" + lis.Addr().String()
	_, err = rpc.Dial(ctx, target)
	if status.Code(err) != codes.Unavailable || !errors.Is(err, transport.ErrNoDevice) {
		t.Fatalf("dial without fallback: %v, want Unavailable wrapping ErrNoDevice", err)
	}
	cc, err := rpc.Dial(ctx, target, rpc.WithFallback("tcp"), rpc.WithLogger(log))
	if err != nil {
		t.Fatalf("dial with fallback: %v", err)
	}
	defer cc.Close()
	resp, err := testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{Payload: []byte("over tcp")})
	if err != nil || string(resp.Payload) != "over tcp" {
		t.Fatalf("call over the fallback: %v", err)
	}
	if n := logs.FilterMessageSnippet("falling back").Len() + logs.FilterMessageSnippet("fallback transport").Len(); n != 2 {
		t.Fatalf("%d fallback log lines, want 2 (one listen, one dial)", n)
	}
}
