package peers

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// grpcgoServer serves gRPC-go's interop TestService on loopback.
func grpcgoServer(t *testing.T, opts ...grpc.ServerOption) (addr string, s *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, interop.NewTestServer())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return lis.Addr().String(), s
}

// rdmarpcClient dials target with rdmarpc's client.
func rdmarpcClient(t *testing.T, target string, opts ...rpc.DialOption) *rpc.ClientConn {
	t.Helper()
	cc, err := rpc.NewClient(target, append([]rpc.DialOption{rpc.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestClientUnary(t *testing.T) {
	addr, _ := grpcgoServer(t)
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	resp, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 314159, Payload: &testpb.Payload{Body: make([]byte, 271828)}})
	if err != nil || len(resp.GetPayload().GetBody()) != 314159 {
		t.Fatalf("UnaryCall: %d bytes, %v", len(resp.GetPayload().GetBody()), err)
	}
}

// The grpc transport goes with any resolver: grpc+ipv4:, grpc+dns:///.
func TestClientResolvers(t *testing.T) {
	addr, _ := grpcgoServer(t)
	_, port, _ := net.SplitHostPort(addr)
	for _, target := range []string{"grpc+ipv4:" + addr, "grpc+dns:///localhost:" + port, "grpc+passthrough:///" + addr} {
		tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, target)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Errorf("%s: %v", target, err)
		}
		cancel()
	}
}

// TestClientAuto: an auto:// target reaches a gRPC-go server. auto:// tries
// RDMA (no device on this host), then rdmarpc over TCP, whose hello the
// server answers in HTTP/2, then the gRPC protocol (issue 21 item 3).
// Before, the dial failed: "not an rdmarpc tcp peer", or hung until the
// handshake timeout when the server's SETTINGS was shorter than a hello.
func TestClientAuto(t *testing.T) {
	addr, _ := grpcgoServer(t)
	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "auto://"+addr)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Fatalf("EmptyCall over auto://: %v", err)
	}
	r, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 10})
	if err != nil || len(r.GetPayload().GetBody()) != 10 {
		t.Fatalf("UnaryCall over auto://: %v, %v", r, err)
	}
}
