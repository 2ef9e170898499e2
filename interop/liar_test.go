package interop

import (
	"context"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// liar is a test server with one deviation from the descriptions (its
// lie); TestCasesCatchLies says which case must catch which lie.
type liar struct {
	grpc_testing.TestServiceServer // the real one
	grpc_testing.UnimplementedUnimplementedServiceServer
	lie string
}

func (l *liar) EmptyCall(ctx context.Context, in *grpc_testing.Empty) (*grpc_testing.Empty, error) {
	if l.lie == "empty call fails" {
		return nil, status.Error(codes.Internal, "lying")
	}
	return l.TestServiceServer.EmptyCall(ctx, in)
}

func (l *liar) UnaryCall(ctx context.Context, in *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	switch l.lie {
	case "short unary payload":
		in.ResponseSize--
	case "unary trailer":
		// The header is echoed, the trailer is not.
		ctx = rpcContextWithout(ctx, echoTrailingKey)
	case "unary status message":
		in.ResponseStatus.Message += "!"
	case "trimmed status message":
		in.ResponseStatus.Message = strings.TrimSpace(in.ResponseStatus.Message)
	}
	return l.TestServiceServer.UnaryCall(ctx, in)
}

// rpcContextWithout is ctx without the incoming metadata key.
func rpcContextWithout(ctx context.Context, key string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Delete(key)
	return metadata.NewIncomingContext(ctx, md)
}

func (l *liar) StreamingInputCall(stream rpc.ClientStreamingServer[grpc_testing.StreamingInputCallRequest, grpc_testing.StreamingInputCallResponse]) error {
	if l.lie == "miscounted upload" {
		stream = &extraByte{stream}
	}
	return l.TestServiceServer.StreamingInputCall(stream)
}

// extraByte counts one byte more in every request.
type extraByte struct {
	rpc.ClientStreamingServer[grpc_testing.StreamingInputCallRequest, grpc_testing.StreamingInputCallResponse]
}

func (e *extraByte) Recv() (*grpc_testing.StreamingInputCallRequest, error) {
	in, err := e.ClientStreamingServer.Recv()
	if err == nil && in.Payload != nil {
		in.Payload.Body = append(in.Payload.Body, 0)
	}
	return in, err
}

func (l *liar) StreamingOutputCall(in *grpc_testing.StreamingOutputCallRequest, stream rpc.ServerStreamingServer[grpc_testing.StreamingOutputCallResponse]) error {
	if l.lie == "last response missing" {
		in.ResponseParameters = in.ResponseParameters[:len(in.ResponseParameters)-1]
	}
	return l.TestServiceServer.StreamingOutputCall(in, stream)
}

func (l *liar) FullDuplexCall(stream rpc.BidiStreamingServer[grpc_testing.StreamingOutputCallRequest, grpc_testing.StreamingOutputCallResponse]) error {
	switch l.lie {
	case "response on an empty stream":
		if err := stream.Send(&grpc_testing.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	case "stream header", "stream trailer":
		key := echoInitialKey
		if l.lie == "stream trailer" {
			key = echoTrailingKey
		}
		stream = &otherContext{stream, rpcContextWithout(stream.Context(), key)}
	case "extra response", "stream status code", "short stream payload":
		stream = &bentRequests{stream, l.lie}
	}
	return l.TestServiceServer.FullDuplexCall(stream)
}

// bentRequests changes each request as the lie says.
type bentRequests struct {
	rpc.BidiStreamingServer[grpc_testing.StreamingOutputCallRequest, grpc_testing.StreamingOutputCallResponse]
	lie string
}

func (b *bentRequests) Recv() (*grpc_testing.StreamingOutputCallRequest, error) {
	in, err := b.BidiStreamingServer.Recv()
	if err != nil {
		return in, err
	}
	switch b.lie {
	case "extra response":
		in.ResponseParameters = append(in.ResponseParameters, &grpc_testing.ResponseParameters{Size: 1})
	case "stream status code":
		if in.ResponseStatus != nil {
			in.ResponseStatus.Code = int32(codes.Internal)
		}
	case "short stream payload":
		for _, p := range in.ResponseParameters {
			p.Size--
		}
	}
	return in, nil
}

// otherContext gives the handler another context.
type otherContext struct {
	rpc.BidiStreamingServer[grpc_testing.StreamingOutputCallRequest, grpc_testing.StreamingOutputCallResponse]
	ctx context.Context
}

func (o *otherContext) Context() context.Context { return o.ctx }

func (l *liar) UnimplementedCall(ctx context.Context, in *grpc_testing.Empty) (*grpc_testing.Empty, error) {
	if l.lie == "implemented" {
		return new(grpc_testing.Empty), nil
	}
	return l.TestServiceServer.UnimplementedCall(ctx, in)
}

// TestCasesCatchLies runs cases against servers with a deviation the case
// must report. Left out are the cases whose verdict the client makes alone
// (timeout_on_sleeping_server, cancel_after_begin,
// cancel_after_first_response: the status comes from the client's own
// deadline or cancel), where no lie of the server shows deterministically.
func TestCasesCatchLies(t *testing.T) {
	for _, tc := range []struct{ lie, name string }{
		{"empty call fails", "empty_unary"},
		{"short unary payload", "large_unary"},
		{"miscounted upload", "client_streaming"},
		{"last response missing", "server_streaming"},
		{"extra response", "ping_pong"},
		{"short stream payload", "ping_pong"},
		{"response on an empty stream", "empty_stream"},
		{"unary trailer", "custom_metadata"},
		{"stream header", "custom_metadata"},
		{"stream trailer", "custom_metadata"},
		{"short stream payload", "custom_metadata"},
		{"unary status message", "status_code_and_message"},
		{"stream status code", "status_code_and_message"},
		{"trimmed status message", "special_status_message"},
		{"implemented", "unimplemented_method"},
		{"implemented", "unimplemented_service"},
	} {
		t.Run(tc.name+"/"+tc.lie, func(t *testing.T) {
			l := &liar{TestServiceServer: NewTestServer(ServerOptions{}), lie: tc.lie}
			cc := serve(t, pipe.New(pipe.Options{}), "liar", l)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			err := Cases[tc.name](ctx, cc)
			if err == nil {
				t.Fatalf("%s passed against a server that lies (%s)", tc.name, tc.lie)
			}
			t.Logf("caught: %v", err)
		})
	}
}
