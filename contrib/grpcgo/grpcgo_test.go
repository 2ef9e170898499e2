package grpcgo_test

// Published protoc-gen-go-grpc stubs, used as they are (gRPC-go's
// grpc_health_v1 with gRPC-go's own health server, etcd's KV and Watch,
// Google's longrunning Operations), served by an rdmarpc Server and called
// through an rdmarpc ClientConn over tcp://.

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	gcodes "google.golang.org/grpc/codes"
	ggzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	gmetadata "google.golang.org/grpc/metadata"
	gpeer "google.golang.org/grpc/peer"
	gstatus "google.golang.org/grpc/status"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// kv is an etcd KV server written against gRPC-go's packages only.
type kv struct {
	etcdserverpb.UnimplementedKVServer
}

func (kv) Range(ctx context.Context, r *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	gmd, _ := gmetadata.FromIncomingContext(ctx)
	if string(r.Key) == "missing" {
		return nil, gstatus.Error(gcodes.NotFound, "no such key")
	}
	if p, ok := gpeer.FromContext(ctx); !ok || p.Addr == nil {
		return nil, gstatus.Error(gcodes.Internal, "no peer")
	}
	if m, ok := grpc.Method(ctx); !ok || m != "/etcdserverpb.KV/Range" {
		return nil, gstatus.Errorf(gcodes.Internal, "method %q", m)
	}
	// The metadata reads the same through rdmarpc's package.
	md, _ := metadata.FromIncomingContext(ctx)
	if got, want := md.Get("tenant"), gmd.Get("tenant"); len(got) != 1 || len(want) != 1 || got[0] != want[0] {
		return nil, gstatus.Errorf(gcodes.Internal, "tenant: rdmarpc %q, gRPC-go %q", got, want)
	}
	if err := grpc.SetHeader(ctx, gmetadata.Pairs("tenant", gmd.Get("tenant")[0])); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, gmetadata.Pairs("revision", "7")); err != nil {
		return nil, err
	}
	return &etcdserverpb.RangeResponse{
		Header: &etcdserverpb.ResponseHeader{Revision: 7},
		Kvs:    []*mvccpb.KeyValue{{Key: r.Key, Value: []byte("v")}},
		Count:  1,
	}, nil
}

// watch answers every create request with a created response.
type watch struct {
	etcdserverpb.UnimplementedWatchServer
}

func (watch) Watch(s grpc.BidiStreamingServer[etcdserverpb.WatchRequest, etcdserverpb.WatchResponse]) error {
	s.SetHeader(gmetadata.Pairs("watching", "yes"))
	for id := int64(1); ; id++ {
		r, err := s.Recv()
		if err == io.EOF {
			s.SetTrailer(gmetadata.Pairs("watches", "done"))
			return nil
		}
		if err != nil {
			return err
		}
		if r.GetCreateRequest() == nil {
			return gstatus.Error(gcodes.InvalidArgument, "only create requests")
		}
		if err := s.Send(&etcdserverpb.WatchResponse{WatchId: id, Created: true}); err != nil {
			return err
		}
	}
}

// operations answers with rdmarpc's status errors.
type operations struct {
	longrunningpb.UnimplementedOperationsServer
}

func (operations) GetOperation(ctx context.Context, r *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	if r.Name != "op-1" {
		return nil, status.Errorf(codes.NotFound, "operation %q", r.Name)
	}
	return &longrunningpb.Operation{Name: r.Name, Done: true}, nil
}

type env struct {
	cc     grpc.ClientConnInterface
	health *health.Server
}

// tcp is where the tests listen on the host; TestRDMA runs them again over
// rdma:// in the Soft-RoCE guest.
const tcp = "tcp://127.0.0.1:0"

func start(t *testing.T, listen string) *env {
	t.Helper()
	lis, err := rpc.Listen(listen)
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer()
	reg := grpcgo.NewServer(s)
	hs := health.NewServer()
	grpc_health_v1.RegisterHealthServer(reg, hs)
	etcdserverpb.RegisterKVServer(reg, kv{})
	etcdserverpb.RegisterWatchServer(reg, watch{})
	longrunningpb.RegisterOperationsServer(reg, operations{})
	testgrpc.RegisterTestServiceServer(reg, summer{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	scheme, _, _ := strings.Cut(listen, "://")
	cc, err := rpc.NewClient(scheme + "://" + lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &env{cc: grpcgo.NewClient(cc), health: hs}
}

func TestHealth(t *testing.T) { testHealth(t, tcp) }

func testHealth(t *testing.T, listen string) {
	e := start(t, listen)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := grpc_health_v1.NewHealthClient(e.cc)
	r, err := c.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil || r.Status != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("Check = %v, %v; want SERVING", r, err)
	}
	_, err = c.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "nope"})
	if gstatus.Code(err) != gcodes.NotFound || status.Code(err) != codes.NotFound {
		t.Errorf("Check(nope) = %v; want NotFound to both status packages", err)
	}

	e.health.SetServingStatus("kv", grpc_health_v1.HealthCheckResponse_SERVING)
	w, err := c.Watch(ctx, &grpc_health_v1.HealthCheckRequest{Service: "kv"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", r, err)
	}
	e.health.SetServingStatus("kv", grpc_health_v1.HealthCheckResponse_NOT_SERVING)
	if r, err := w.Recv(); err != nil || r.Status != grpc_health_v1.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch after the change: %v, %v; want NOT_SERVING", r, err)
	}
	cancel()
	if _, err := w.Recv(); gstatus.Code(err) != gcodes.Canceled {
		t.Errorf("Watch after cancel: %v; want Canceled", err)
	}
}

func TestEtcdKV(t *testing.T) { testEtcdKV(t, tcp) }

func testEtcdKV(t *testing.T, listen string) {
	e := start(t, listen)
	c := etcdserverpb.NewKVClient(e.cc)
	ctx := gmetadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")

	var header, trailer gmetadata.MD
	var p gpeer.Peer
	var finished []error
	r, err := c.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("k")},
		grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p), grpc.WaitForReady(true),
		grpc.MaxCallRecvMsgSize(1<<20), grpc.MaxCallSendMsgSize(1<<20), grpc.CallContentSubtype("proto"),
		grpc.OnFinish(func(err error) { finished = append(finished, err) }))
	if err != nil {
		t.Fatalf("Range: %v", err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" || r.Header.GetRevision() != 7 {
		t.Errorf("Range = %v", r)
	}
	if got := header.Get("tenant"); len(got) != 1 || got[0] != "acme" {
		t.Errorf("header tenant = %q, want [acme]", got)
	}
	if got := trailer.Get("revision"); len(got) != 1 || got[0] != "7" {
		t.Errorf("trailer revision = %q, want [7]", got)
	}
	if p.Addr == nil {
		t.Error("no peer")
	}
	if len(finished) != 1 || finished[0] != nil {
		t.Errorf("OnFinish saw %v, want one nil", finished)
	}

	// A gRPC-go status error from the handler, read by both packages.
	_, err = c.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("missing")})
	if s, ok := gstatus.FromError(err); !ok || s.Code() != gcodes.NotFound || s.Message() != "no such key" {
		t.Errorf("gRPC-go's status of %v: %v, %v", err, s, ok)
	}
	if s, ok := status.FromError(err); !ok || s.Code() != codes.NotFound || s.Message() != "no such key" {
		t.Errorf("rdmarpc's status of %v: %v, %v", err, s, ok)
	}
}

func TestEtcdWatch(t *testing.T) { testEtcdWatch(t, tcp) }

func testEtcdWatch(t *testing.T, listen string) {
	e := start(t, listen)
	var header, trailer gmetadata.MD
	w, err := etcdserverpb.NewWatchClient(e.cc).Watch(context.Background(), grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 3; want++ {
		if err := w.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{
			CreateRequest: &etcdserverpb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
			t.Fatal(err)
		}
		r, err := w.Recv()
		if err != nil || r.WatchId != want || !r.Created {
			t.Fatalf("Recv = %v, %v; want watch %d created", r, err, want)
		}
	}
	if md, err := w.Header(); err != nil || len(md.Get("watching")) != 1 {
		t.Errorf("Header = %v, %v", md, err)
	}
	if err := w.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != io.EOF {
		t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
	}
	if got := trailer.Get("watches"); len(got) != 1 || got[0] != "done" {
		t.Errorf("trailer = %v", trailer)
	}
	if got := w.Trailer().Get("watches"); len(got) != 1 {
		t.Errorf("Trailer() = %v", w.Trailer())
	}
}

func TestLongrunning(t *testing.T) { testLongrunning(t, tcp) }

func testLongrunning(t *testing.T, listen string) {
	e := start(t, listen)
	c := longrunningpb.NewOperationsClient(e.cc)
	op, err := c.GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: "op-1"})
	if err != nil || !op.Done {
		t.Fatalf("GetOperation = %v, %v", op, err)
	}
	// rdmarpc's status error from the handler, read by gRPC-go's package.
	_, err = c.GetOperation(context.Background(), &longrunningpb.GetOperationRequest{Name: "op-2"})
	if s, ok := gstatus.FromError(err); !ok || s.Code() != gcodes.NotFound || !strings.Contains(s.Message(), "op-2") {
		t.Errorf("GetOperation(op-2): %v, %v", s, ok)
	}
	// A method the server does not implement.
	_, err = c.DeleteOperation(context.Background(), &longrunningpb.DeleteOperationRequest{Name: "op-1"})
	if gstatus.Code(err) != gcodes.Unimplemented {
		t.Errorf("DeleteOperation: %v, want Unimplemented", err)
	}
}

// TestUseCompressor: grpc.UseCompressor with the compressor gRPC-go's
// encoding/gzip registered compresses the call over rdmarpc (a 1 MiB key
// passes a 64 KiB send limit); a compressor neither library has fails the
// call Internal before it leaves, as in gRPC-go.
func TestUseCompressor(t *testing.T) {
	e := start(t, tcp)
	c := etcdserverpb.NewKVClient(e.cc)
	ctx := gmetadata.AppendToOutgoingContext(context.Background(), "tenant", "t1")
	big := &etcdserverpb.RangeRequest{Key: make([]byte, 1<<20)}
	if _, err := c.Range(ctx, big, grpc.MaxCallSendMsgSize(64<<10)); gstatus.Code(err) != gcodes.ResourceExhausted {
		t.Fatalf("1 MiB uncompressed under a 64 KiB limit: %v, want ResourceExhausted", err)
	}
	resp, err := c.Range(ctx, big, grpc.MaxCallSendMsgSize(64<<10), grpc.UseCompressor(ggzip.Name))
	if err != nil || len(resp.GetKvs()) != 1 || len(resp.Kvs[0].Key) != 1<<20 {
		t.Fatalf("compressed: %v, %v", resp.GetKvs(), err)
	}
	if _, err := c.Range(ctx, big, grpc.UseCompressor("snappy")); gstatus.Code(err) != gcodes.Internal {
		t.Errorf("UseCompressor(snappy): %v, want Internal", err)
	}
}

// TestUnknownCallOption: a gRPC-go call option rdmarpc cannot honour fails
// the call, naming it, rather than being ignored.
func TestUnknownCallOption(t *testing.T) {
	e := start(t, tcp)
	c := etcdserverpb.NewKVClient(e.cc)
	for _, o := range []grpc.CallOption{
		grpc.MaxRetryRPCBufferSize(1),
		grpc.CallContentSubtype("json"),
	} {
		_, err := c.Range(context.Background(), &etcdserverpb.RangeRequest{Key: []byte("k")}, o)
		if gstatus.Code(err) != gcodes.InvalidArgument || !strings.Contains(err.Error(), "grpcgo") {
			t.Errorf("with %T: %v; want InvalidArgument from grpcgo", o, err)
		}
		if _, err := etcdserverpb.NewWatchClient(e.cc).Watch(context.Background(), o); gstatus.Code(err) != gcodes.InvalidArgument {
			t.Errorf("stream with %T: %v; want InvalidArgument", o, err)
		}
	}
	var unwrapped interface{ Unwrap() error }
	_, err := c.Range(context.Background(), &etcdserverpb.RangeRequest{Key: []byte("missing")})
	if !errors.As(err, &unwrapped) {
		t.Errorf("%T does not wrap rdmarpc's error", err)
	}
}

// TestRDMA runs the stubs over rdma://, in the Soft-RoCE guest
// (testbed/tests.txt).
func TestRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if ip == "" {
		t.Skip("RDMARPC_TEST_IP is not set: no RDMA device to test on (this test runs in the Soft-RoCE guest)")
	}
	listen := "rdma://" + net.JoinHostPort(ip, "0")
	t.Run("health", func(t *testing.T) { testHealth(t, listen) })
	t.Run("etcd_kv", func(t *testing.T) { testEtcdKV(t, listen) })
	t.Run("etcd_watch", func(t *testing.T) { testEtcdWatch(t, listen) })
	t.Run("longrunning", func(t *testing.T) { testLongrunning(t, listen) })
	t.Run("client_streaming", func(t *testing.T) { testClientStreaming(t, listen) })
}

// summer is gRPC-go's interop TestService, client streaming only.
type summer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (summer) StreamingInputCall(s grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	var n int32
	for {
		r, err := s.Recv()
		if err == io.EOF {
			s.SetTrailer(gmetadata.Pairs("sum", "done"))
			return s.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			return err
		}
		n += int32(len(r.GetPayload().GetBody()))
	}
}

// TestClientStreaming: the call options of a client-streaming call see its
// end when its one response arrives.
func TestClientStreaming(t *testing.T) { testClientStreaming(t, tcp) }

func testClientStreaming(t *testing.T, listen string) {
	e := start(t, listen)
	var trailer gmetadata.MD
	var finished []error
	s, err := testgrpc.NewTestServiceClient(e.cc).StreamingInputCall(context.Background(),
		grpc.Trailer(&trailer), grpc.OnFinish(func(err error) { finished = append(finished, err) }))
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{3, 4} {
		if err := s.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.CloseAndRecv()
	if err != nil || r.AggregatedPayloadSize != 7 {
		t.Fatalf("CloseAndRecv = %v, %v; want 7", r, err)
	}
	if got := trailer.Get("sum"); len(got) != 1 || got[0] != "done" {
		t.Errorf("trailer = %v, want sum: done", trailer)
	}
	if len(finished) != 1 || finished[0] != nil {
		t.Errorf("OnFinish saw %v, want one nil", finished)
	}
}
