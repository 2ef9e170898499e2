package interop

import (
	"context"
	"io"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// The metadata keys a server echoes ("Echo Metadata" in the descriptions):
// the first back in the response's header, the second in its trailer.
const (
	echoInitialKey  = "x-grpc-test-echo-initial"
	echoTrailingKey = "x-grpc-test-echo-trailing-bin"
)

// ServerOptions bounds what a client can make the test server do.
type ServerOptions struct {
	// MaxPayload is the largest payload body a request may ask for; larger
	// sizes fail with InvalidArgument before anything is allocated.
	// Default 4 MiB, the rpc package's default message limit.
	MaxPayload int
	// MaxBuffered bounds the bytes of requests HalfDuplexCall holds until
	// the client's half-close; past it the call fails with
	// ResourceExhausted. Default 16 MiB.
	MaxBuffered int
}

// NewTestServer returns an implementation of grpc.testing.TestService that
// behaves as the interop descriptions' server features say: EmptyCall,
// UnaryCall, CacheableUnaryCall, StreamingInputCall, StreamingOutputCall,
// FullDuplexCall and HalfDuplexCall, with Echo Status, Echo Metadata and
// ResponseParameters.interval_us. UnimplementedCall stays unimplemented.
// Compression is not supported: a request that expects a compressed
// message fails with InvalidArgument, as the descriptions require of a
// server whose request was not compressed.
func NewTestServer(o ServerOptions) grpc_testing.TestServiceServer {
	if o.MaxPayload <= 0 {
		o.MaxPayload = 4 << 20
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = 16 << 20
	}
	return &testServer{o: o}
}

type testServer struct {
	grpc_testing.UnimplementedTestServiceServer
	o ServerOptions
}

// payload returns a payload body of size zeros.
func (s *testServer) payload(t grpc_testing.PayloadType, size int32) (*grpc_testing.Payload, error) {
	if t != grpc_testing.PayloadType_COMPRESSABLE {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported payload type %v", t)
	}
	if size < 0 || int(size) > s.o.MaxPayload {
		return nil, status.Errorf(codes.InvalidArgument, "payload size %d is outside [0, %d]", size, s.o.MaxPayload)
	}
	return &grpc_testing.Payload{Type: t, Body: make([]byte, size)}, nil
}

// echoStatus is the status a request's response_status asks for, nil for
// none (absent, or code OK).
func echoStatus(es *grpc_testing.EchoStatus) error {
	if es == nil || es.GetCode() == 0 {
		return nil
	}
	return status.Error(codes.Code(es.GetCode()), es.GetMessage())
}

// echoMetadata sends the echoed keys of the call's metadata back: the
// initial one in the header (which SetHeader only arranges), the trailing
// one in the trailer.
func echoMetadata(ctx context.Context, setHeader func(metadata.MD) error, setTrailer func(metadata.MD)) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(echoInitialKey); len(v) > 0 {
		if err := setHeader(metadata.MD{echoInitialKey: v}); err != nil {
			return err
		}
	}
	if v := md.Get(echoTrailingKey); len(v) > 0 {
		setTrailer(metadata.MD{echoTrailingKey: v})
	}
	return nil
}

func unaryEcho(ctx context.Context) error {
	return echoMetadata(ctx,
		func(md metadata.MD) error { return rpc.SetHeader(ctx, md) },
		func(md metadata.MD) { _ = rpc.SetTrailer(ctx, md) })
}

func streamEcho(ss rpc.ServerStream) error {
	return echoMetadata(ss.Context(), ss.SetHeader, ss.SetTrailer)
}

// expectUncompressed fails a request that expects compression: rdmarpc
// never compresses, so such a request arrived uncompressed.
func expectUncompressed(b *grpc_testing.BoolValue) error {
	if b.GetValue() {
		return status.Error(codes.InvalidArgument, "the request was expected to be compressed, and it was not (rdmarpc does not compress)")
	}
	return nil
}

func (s *testServer) EmptyCall(ctx context.Context, _ *grpc_testing.Empty) (*grpc_testing.Empty, error) {
	if err := unaryEcho(ctx); err != nil {
		return nil, err
	}
	return new(grpc_testing.Empty), nil
}

func (s *testServer) UnaryCall(ctx context.Context, in *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	if err := unaryEcho(ctx); err != nil {
		return nil, err
	}
	if err := echoStatus(in.GetResponseStatus()); err != nil {
		return nil, err
	}
	if err := expectUncompressed(in.GetExpectCompressed()); err != nil {
		return nil, err
	}
	p, err := s.payload(in.GetResponseType(), in.GetResponseSize())
	if err != nil {
		return nil, err
	}
	return &grpc_testing.SimpleResponse{Payload: p}, nil
}

// CacheableUnaryCall answers with the time as its payload, different for
// every call; there is no caching proxy in rdmarpc's path to keep it.
func (s *testServer) CacheableUnaryCall(ctx context.Context, _ *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	if err := unaryEcho(ctx); err != nil {
		return nil, err
	}
	body := strconv.AppendInt(nil, time.Now().UnixNano(), 10)
	return &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: body}}, nil
}

func (s *testServer) StreamingInputCall(stream rpc.ClientStreamingServer[grpc_testing.StreamingInputCallRequest, grpc_testing.StreamingInputCallResponse]) error {
	var sum int
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&grpc_testing.StreamingInputCallResponse{AggregatedPayloadSize: int32(min(sum, 1<<31-1))})
		}
		if err != nil {
			return err
		}
		if err := expectUncompressed(in.GetExpectCompressed()); err != nil {
			return err
		}
		sum += len(in.GetPayload().GetBody())
	}
}

func (s *testServer) StreamingOutputCall(in *grpc_testing.StreamingOutputCallRequest, stream rpc.ServerStreamingServer[grpc_testing.StreamingOutputCallResponse]) error {
	if err := streamEcho(stream); err != nil {
		return err
	}
	if err := s.respond(stream.Context(), in, stream.Send); err != nil {
		return err
	}
	return echoStatus(in.GetResponseStatus())
}

// respond sends the responses in's ResponseParameters describe, each after
// its interval.
func (s *testServer) respond(ctx context.Context, in *grpc_testing.StreamingOutputCallRequest, send func(*grpc_testing.StreamingOutputCallResponse) error) error {
	for _, p := range in.GetResponseParameters() {
		if d := time.Duration(p.GetIntervalUs()) * time.Microsecond; d > 0 {
			if err := sleep(ctx, d); err != nil {
				return err
			}
		}
		if p.GetCompressed().GetValue() {
			return status.Error(codes.InvalidArgument, "compressed responses are not supported (rdmarpc does not compress)")
		}
		pl, err := s.payload(in.GetResponseType(), p.GetSize())
		if err != nil {
			return err
		}
		if err := send(&grpc_testing.StreamingOutputCallResponse{Payload: pl}); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits d or until ctx ends (its status).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (s *testServer) FullDuplexCall(stream rpc.BidiStreamingServer[grpc_testing.StreamingOutputCallRequest, grpc_testing.StreamingOutputCallResponse]) error {
	if err := streamEcho(stream); err != nil {
		return err
	}
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		// Echo Status ends the call, before any of this request's
		// responses: the server processes nothing further.
		if err := echoStatus(in.GetResponseStatus()); err != nil {
			return err
		}
		if err := s.respond(stream.Context(), in, stream.Send); err != nil {
			return err
		}
	}
}

func (s *testServer) HalfDuplexCall(stream rpc.BidiStreamingServer[grpc_testing.StreamingOutputCallRequest, grpc_testing.StreamingOutputCallResponse]) error {
	if err := streamEcho(stream); err != nil {
		return err
	}
	var held []*grpc_testing.StreamingOutputCallRequest
	var bytes int
	for {
		in, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if bytes += proto.Size(in); bytes > s.o.MaxBuffered {
			return status.Errorf(codes.ResourceExhausted, "HalfDuplexCall holds at most %d bytes of requests until the half-close", s.o.MaxBuffered)
		}
		held = append(held, in)
	}
	for _, in := range held {
		if err := echoStatus(in.GetResponseStatus()); err != nil {
			return err
		}
		if err := s.respond(stream.Context(), in, stream.Send); err != nil {
			return err
		}
	}
	return nil
}
