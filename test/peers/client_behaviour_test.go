package peers

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
)

// detailService answers UnaryCall with a status carrying details, and
// echoes binary and text metadata in headers and trailers.
type detailService struct {
	testpb.UnimplementedTestServiceServer
}

func (detailService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	grpc.SetHeader(ctx, metadata.Pairs("h-bin", string(append([]byte{0, 0xff}, md.Get("in-bin")[0]...)), "h-text", "header value"))
	grpc.SetTrailer(ctx, metadata.Pairs("t-bin", "\x01\x02", "t-text", md.Get("in-text")[0]))
	st, err := status.New(codes.FailedPrecondition, "précondition: ☃ 100%").WithDetails(&errdetails.ErrorInfo{Reason: "BECAUSE", Domain: "rdmarpc.test"})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

func TestClientStatusDetailsAndMetadata(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, detailService{})
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	defer func() { s.Stop(); <-done }()

	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+lis.Addr().String())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "in-bin", "\x00\x01\xfe", "in-text", "hello")
	var header, trailer metadata.MD
	_, err = tc.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || st.Message() != "précondition: ☃ 100%" {
		t.Fatalf("status %v %q, want FailedPrecondition with the message", st.Code(), st.Message())
	}
	if d := st.Details(); len(d) != 1 || d[0].(*errdetails.ErrorInfo).GetReason() != "BECAUSE" {
		t.Fatalf("details %v", d)
	}
	if got := header.Get("h-bin"); len(got) != 1 || got[0] != "\x00\xff\x00\x01\xfe" {
		t.Errorf("header h-bin %q", got)
	}
	if got := header.Get("h-text"); len(got) != 1 || got[0] != "header value" {
		t.Errorf("header h-text %q", got)
	}
	if got := trailer.Get("t-bin"); len(got) != 1 || got[0] != "\x01\x02" {
		t.Errorf("trailer t-bin %q", got)
	}
	if got := trailer.Get("t-text"); len(got) != 1 || got[0] != "hello" {
		t.Errorf("trailer t-text %q", got)
	}
}

func TestClientHealth(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("kv", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	defer func() { s.Stop(); <-done }()

	hc := healthpb.NewHealthClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+lis.Addr().String())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check(\"\"): %v, %v", r.GetStatus(), err)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(nope): %v, want NotFound", err)
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch first: %v, %v", r.GetStatus(), err)
	}
	hs.SetServingStatus("kv", healthpb.HealthCheckResponse_SERVING)
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch after the change: %v, %v", r.GetStatus(), err)
	}
}

// countingService is gRPC-go's interop TestService counting its unary
// calls.
type countingService struct {
	testpb.TestServiceServer
	calls atomic.Int64
}

func (c *countingService) EmptyCall(ctx context.Context, in *testpb.Empty) (*testpb.Empty, error) {
	c.calls.Add(1)
	return c.TestServiceServer.EmptyCall(ctx, in)
}

// TestClientGracefulStop: gRPC-go's GracefulStop sends GOAWAY; the stream
// open on the old connection finishes there, and new calls go to a new
// connection (here a new server on the same port).
func TestClientGracefulStop(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	a := grpc.NewServer()
	testpb.RegisterTestServiceServer(a, interop.NewTestServer())
	aDone := make(chan struct{})
	go func() { defer close(aDone); a.Serve(lis) }()
	defer func() { a.Stop(); <-aDone }()

	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := tc.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pingPong := func() {
		t.Helper()
		if err := stream.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 10}}}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if r, err := stream.Recv(); err != nil || len(r.GetPayload().GetBody()) != 10 {
			t.Fatalf("Recv: %v", err)
		}
	}
	pingPong() // the connection is up, the stream open

	stopped := make(chan struct{})
	go func() { defer close(stopped); a.GracefulStop() }()
	// GracefulStop closes the listener first: a new server takes the port.
	var lis2 net.Listener
	for i := 0; ; i++ {
		if lis2, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if i == 10000 {
			t.Fatalf("the port never came free: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	b := grpc.NewServer()
	bs := &countingService{TestServiceServer: interop.NewTestServer()}
	testpb.RegisterTestServiceServer(b, bs)
	bDone := make(chan struct{})
	go func() { defer close(bDone); b.Serve(lis2) }()
	defer func() { b.Stop(); <-bDone }()

	// Until the GOAWAY arrives, a call may still go to the old connection
	// and be refused there (REFUSED_STREAM or above the GOAWAY's last
	// stream): rdmarpc sends it again. Every call must succeed, and once
	// the old connection is draining they reach b.
	for bs.calls.Load() == 0 {
		if _, err := tc.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatalf("EmptyCall during GracefulStop: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("no call reached the new server")
		default:
		}
	}
	pingPong() // the old stream still works on the old connection
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while a stream was open")
	default:
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
	<-stopped
}

// cancelService's StreamingOutputCall sends one message and waits for its
// context, which the client's cancellation must end.
type cancelService struct {
	testpb.UnimplementedTestServiceServer
	ended chan error
}

func (c cancelService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st testpb.TestService_StreamingOutputCallServer) error {
	if err := st.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-st.Context().Done()
	c.ended <- st.Context().Err()
	return nil
}

// A server-streaming call cancelled after its request has wholly left
// (END_STREAM sent) reaches the server's handler as a cancellation.
func TestClientCancelReachesServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	svc := cancelService{ended: make(chan error, 1)}
	testpb.RegisterTestServiceServer(s, svc)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	defer func() { s.Stop(); <-done }()

	tc := testpb.NewTestServiceClient(grpcgo.NewClient(rdmarpcClient(t, "grpc://"+lis.Addr().String())))
	ctx, cancel := context.WithCancel(context.Background())
	st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("after cancel: %v", err)
	}
	select {
	case err := <-svc.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the handler's context ended with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the server's handler was never cancelled")
	}
}
