package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// A Case is the client side of one interop test case: it makes the calls
// the description's procedure says on cc and returns an error describing
// the first deviation from what the description asserts, nil when there
// is none. ctx bounds the whole case.
type Case func(ctx context.Context, cc rpc.ClientConnInterface) error

// Cases are the test cases by their names in the descriptions (the
// client's --test_case), in the order Names lists them.
var Cases = map[string]Case{
	"empty_unary":                 EmptyUnary,
	"large_unary":                 LargeUnary,
	"client_streaming":            ClientStreaming,
	"server_streaming":            ServerStreaming,
	"ping_pong":                   PingPong,
	"empty_stream":                EmptyStream,
	"timeout_on_sleeping_server":  TimeoutOnSleepingServer,
	"cancel_after_begin":          CancelAfterBegin,
	"cancel_after_first_response": CancelAfterFirstResponse,
	"custom_metadata":             CustomMetadata,
	"status_code_and_message":     StatusCodeAndMessage,
	"special_status_message":      SpecialStatusMessage,
	"unimplemented_method":        UnimplementedMethod,
	"unimplemented_service":       UnimplementedService,
}

// Names lists the cases in the descriptions' order.
var Names = []string{
	"empty_unary", "large_unary", "client_streaming", "server_streaming",
	"ping_pong", "empty_stream", "timeout_on_sleeping_server",
	"cancel_after_begin", "cancel_after_first_response", "custom_metadata",
	"status_code_and_message", "special_status_message",
	"unimplemented_method", "unimplemented_service",
}

// The sizes the descriptions prescribe.
const (
	largeRequestSize  = 271828
	largeResponseSize = 314159
)

var (
	streamRequestSizes  = []int{27182, 8, 1828, 45904} // client_streaming, ping_pong; sum 74922
	streamResponseSizes = []int{31415, 9, 2653, 58979} // server_streaming, ping_pong
)

func zeros(n int) *grpc_testing.Payload {
	return &grpc_testing.Payload{Type: grpc_testing.PayloadType_COMPRESSABLE, Body: make([]byte, n)}
}

// checkPayload checks that p is a COMPRESSABLE body of want zeros.
func checkPayload(what string, p *grpc_testing.Payload, want int) error {
	if p.GetType() != grpc_testing.PayloadType_COMPRESSABLE {
		return fmt.Errorf("%s: payload type %v, want COMPRESSABLE", what, p.GetType())
	}
	body := p.GetBody()
	if len(body) != want {
		return fmt.Errorf("%s: payload body of %d bytes, want %d", what, len(body), want)
	}
	if i := bytes.IndexFunc(body, func(r rune) bool { return r != 0 }); i >= 0 {
		return fmt.Errorf("%s: payload byte %d is not zero", what, i)
	}
	return nil
}

// wantCode checks that err is a status error with code want.
func wantCode(what string, err error, want codes.Code) error {
	if err == nil {
		return fmt.Errorf("%s succeeded, want status %v", what, want)
	}
	if got := status.Code(err); got != want {
		return fmt.Errorf("%s: status %v (%v), want %v", what, got, err, want)
	}
	return nil
}

// wantEnd checks that the stream's next Recv is its OK end.
func wantEnd(what string, recv func() error) error {
	if err := recv(); err != io.EOF {
		if err == nil {
			return fmt.Errorf("%s: a response past the last one expected", what)
		}
		return fmt.Errorf("%s: stream ended with %v, want io.EOF (status OK)", what, err)
	}
	return nil
}

// EmptyUnary: EmptyCall with an empty request succeeds with an empty
// response (zero bytes encoded).
func EmptyUnary(ctx context.Context, cc rpc.ClientConnInterface) error {
	reply, err := grpc_testing.NewTestServiceClient(cc).EmptyCall(ctx, new(grpc_testing.Empty))
	if err != nil {
		return fmt.Errorf("EmptyCall: %w", err)
	}
	if reply == nil {
		return errors.New("EmptyCall: nil response")
	}
	if n := proto.Size(reply); n != 0 {
		return fmt.Errorf("EmptyCall: response of %d bytes, want 0", n)
	}
	return nil
}

// LargeUnary: UnaryCall with a 271828-byte payload answers with 314159
// bytes of zeros.
func LargeUnary(ctx context.Context, cc rpc.ClientConnInterface) error {
	reply, err := grpc_testing.NewTestServiceClient(cc).UnaryCall(ctx, &grpc_testing.SimpleRequest{
		ResponseType: grpc_testing.PayloadType_COMPRESSABLE,
		ResponseSize: largeResponseSize,
		Payload:      zeros(largeRequestSize),
	})
	if err != nil {
		return fmt.Errorf("UnaryCall: %w", err)
	}
	return checkPayload("UnaryCall", reply.GetPayload(), largeResponseSize)
}

// ClientStreaming: four requests of 27182, 8, 1828 and 45904 bytes, then
// the half-close; the response counts 74922 bytes.
func ClientStreaming(ctx context.Context, cc rpc.ClientConnInterface) error {
	stream, err := grpc_testing.NewTestServiceClient(cc).StreamingInputCall(ctx)
	if err != nil {
		return fmt.Errorf("StreamingInputCall: %w", err)
	}
	sum := 0
	for _, n := range streamRequestSizes {
		if err := stream.Send(&grpc_testing.StreamingInputCallRequest{Payload: zeros(n)}); err != nil {
			return fmt.Errorf("StreamingInputCall: sending %d bytes: %w", n, err)
		}
		sum += n
	}
	reply, err := stream.CloseAndRecv()
	if err != nil {
		return fmt.Errorf("StreamingInputCall: %w", err)
	}
	if got := reply.GetAggregatedPayloadSize(); got != int32(sum) {
		return fmt.Errorf("StreamingInputCall: aggregated_payload_size %d, want %d", got, sum)
	}
	return nil
}

// ServerStreaming: one request for four responses of 31415, 9, 2653 and
// 58979 bytes, which arrive in that order, and nothing more.
func ServerStreaming(ctx context.Context, cc rpc.ClientConnInterface) error {
	req := &grpc_testing.StreamingOutputCallRequest{ResponseType: grpc_testing.PayloadType_COMPRESSABLE}
	for _, n := range streamResponseSizes {
		req.ResponseParameters = append(req.ResponseParameters, &grpc_testing.ResponseParameters{Size: int32(n)})
	}
	stream, err := grpc_testing.NewTestServiceClient(cc).StreamingOutputCall(ctx, req)
	if err != nil {
		return fmt.Errorf("StreamingOutputCall: %w", err)
	}
	for i, n := range streamResponseSizes {
		reply, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("StreamingOutputCall: response %d of %d: %w", i+1, len(streamResponseSizes), err)
		}
		if err := checkPayload(fmt.Sprintf("StreamingOutputCall: response %d", i+1), reply.GetPayload(), n); err != nil {
			return err
		}
	}
	return wantEnd("StreamingOutputCall", func() error { _, err := stream.Recv(); return err })
}

// PingPong: four requests on FullDuplexCall, each sent after the previous
// one's response came; then the half-close, and the stream ends OK.
func PingPong(ctx context.Context, cc rpc.ClientConnInterface) error {
	stream, err := grpc_testing.NewTestServiceClient(cc).FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall: %w", err)
	}
	for i, n := range streamResponseSizes {
		req := &grpc_testing.StreamingOutputCallRequest{
			ResponseType:       grpc_testing.PayloadType_COMPRESSABLE,
			ResponseParameters: []*grpc_testing.ResponseParameters{{Size: int32(n)}},
			Payload:            zeros(streamRequestSizes[i]),
		}
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("FullDuplexCall: request %d: %w", i+1, err)
		}
		reply, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("FullDuplexCall: response %d: %w", i+1, err)
		}
		if err := checkPayload(fmt.Sprintf("FullDuplexCall: response %d", i+1), reply.GetPayload(), n); err != nil {
			return err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("FullDuplexCall: CloseSend: %w", err)
	}
	return wantEnd("FullDuplexCall", func() error { _, err := stream.Recv(); return err })
}

// EmptyStream: FullDuplexCall half-closed at once ends OK with no
// response.
func EmptyStream(ctx context.Context, cc rpc.ClientConnInterface) error {
	stream, err := grpc_testing.NewTestServiceClient(cc).FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("FullDuplexCall: CloseSend: %w", err)
	}
	return wantEnd("FullDuplexCall", func() error { _, err := stream.Recv(); return err })
}

// TimeoutOnSleepingServer: a FullDuplexCall with a 1 ms timeout, whose
// server waits for more requests, ends DeadlineExceeded. The deadline may
// pass before the stream opens or while its request is sent: either way
// the call's status must be DeadlineExceeded.
func TimeoutOnSleepingServer(ctx context.Context, cc rpc.ClientConnInterface) error {
	ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	stream, err := grpc_testing.NewTestServiceClient(cc).FullDuplexCall(ctx)
	if err != nil {
		return wantCode("FullDuplexCall", err, codes.DeadlineExceeded)
	}
	err = stream.Send(&grpc_testing.StreamingOutputCallRequest{Payload: zeros(27182)})
	if err != nil && err != io.EOF {
		return wantCode("FullDuplexCall: Send", err, codes.DeadlineExceeded)
	}
	_, err = stream.Recv()
	return wantCode("FullDuplexCall", err, codes.DeadlineExceeded)
}

// CancelAfterBegin: a StreamingInputCall cancelled before it sends a
// message ends Canceled.
func CancelAfterBegin(ctx context.Context, cc rpc.ClientConnInterface) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := grpc_testing.NewTestServiceClient(cc).StreamingInputCall(ctx)
	if err != nil {
		return fmt.Errorf("StreamingInputCall: %w", err)
	}
	cancel()
	_, err = stream.CloseAndRecv()
	return wantCode("StreamingInputCall", err, codes.Canceled)
}

// CancelAfterFirstResponse: a FullDuplexCall cancelled after its first
// response ends Canceled.
func CancelAfterFirstResponse(ctx context.Context, cc rpc.ClientConnInterface) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := grpc_testing.NewTestServiceClient(cc).FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall: %w", err)
	}
	req := &grpc_testing.StreamingOutputCallRequest{
		ResponseType:       grpc_testing.PayloadType_COMPRESSABLE,
		ResponseParameters: []*grpc_testing.ResponseParameters{{Size: 31415}},
		Payload:            zeros(27182),
	}
	if err := stream.Send(req); err != nil {
		return fmt.Errorf("FullDuplexCall: Send: %w", err)
	}
	if _, err := stream.Recv(); err != nil {
		return fmt.Errorf("FullDuplexCall: first response: %w", err)
	}
	cancel()
	_, err = stream.Recv()
	return wantCode("FullDuplexCall after the cancel", err, codes.Canceled)
}

// The metadata custom_metadata sends and expects back.
const (
	echoInitialValue  = "test_initial_metadata_value"
	echoTrailingValue = "\xab\xab\xab"
)

// checkEcho checks that header carries the initial key and trailer the
// trailing one, each with exactly the value sent.
func checkEcho(what string, header, trailer metadata.MD) error {
	if got := header.Get(echoInitialKey); len(got) != 1 || got[0] != echoInitialValue {
		return fmt.Errorf("%s: header %s = %q, want [%q]", what, echoInitialKey, got, echoInitialValue)
	}
	if got := trailer.Get(echoTrailingKey); len(got) != 1 || got[0] != echoTrailingValue {
		return fmt.Errorf("%s: trailer %s = %q, want [%q]", what, echoTrailingKey, got, echoTrailingValue)
	}
	return nil
}

// CustomMetadata: the server echoes x-grpc-test-echo-initial in the
// header and x-grpc-test-echo-trailing-bin in the trailer, on a UnaryCall
// and on a FullDuplexCall.
func CustomMetadata(ctx context.Context, cc rpc.ClientConnInterface) error {
	ctx = metadata.AppendToOutgoingContext(ctx, echoInitialKey, echoInitialValue, echoTrailingKey, echoTrailingValue)
	tc := grpc_testing.NewTestServiceClient(cc)

	var header, trailer metadata.MD
	reply, err := tc.UnaryCall(ctx, &grpc_testing.SimpleRequest{
		ResponseType: grpc_testing.PayloadType_COMPRESSABLE,
		ResponseSize: largeResponseSize,
		Payload:      zeros(largeRequestSize),
	}, rpc.Header(&header), rpc.Trailer(&trailer))
	if err != nil {
		return fmt.Errorf("UnaryCall: %w", err)
	}
	if err := checkPayload("UnaryCall", reply.GetPayload(), largeResponseSize); err != nil {
		return err
	}
	if err := checkEcho("UnaryCall", header, trailer); err != nil {
		return err
	}

	stream, err := tc.FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall: %w", err)
	}
	err = stream.Send(&grpc_testing.StreamingOutputCallRequest{
		ResponseType:       grpc_testing.PayloadType_COMPRESSABLE,
		ResponseParameters: []*grpc_testing.ResponseParameters{{Size: largeResponseSize}},
		Payload:            zeros(largeRequestSize),
	})
	if err != nil {
		return fmt.Errorf("FullDuplexCall: Send: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("FullDuplexCall: CloseSend: %w", err)
	}
	if header, err = stream.Header(); err != nil {
		return fmt.Errorf("FullDuplexCall: Header: %w", err)
	}
	sr, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("FullDuplexCall: response: %w", err)
	}
	if err := checkPayload("FullDuplexCall", sr.GetPayload(), largeResponseSize); err != nil {
		return err
	}
	if err := wantEnd("FullDuplexCall", func() error { _, err := stream.Recv(); return err }); err != nil {
		return err
	}
	return checkEcho("FullDuplexCall", header, stream.Trailer())
}

// wantStatus checks that err is exactly the status st asks for: code and
// message, byte for byte.
func wantStatus(what string, err error, st *grpc_testing.EchoStatus) error {
	if err == nil {
		return fmt.Errorf("%s succeeded, want status %d %q", what, st.Code, st.Message)
	}
	s := status.Convert(err)
	if s.Code() != codes.Code(st.Code) || s.Message() != st.Message {
		return fmt.Errorf("%s: status %v %q, want %v %q", what, s.Code(), s.Message(), codes.Code(st.Code), st.Message)
	}
	return nil
}

// StatusCodeAndMessage: the status a request asks for comes back, code and
// message, from a UnaryCall and from a FullDuplexCall.
func StatusCodeAndMessage(ctx context.Context, cc rpc.ClientConnInterface) error {
	st := &grpc_testing.EchoStatus{Code: int32(codes.Unknown), Message: "test status message"}
	tc := grpc_testing.NewTestServiceClient(cc)
	_, err := tc.UnaryCall(ctx, &grpc_testing.SimpleRequest{ResponseStatus: st})
	if err := wantStatus("UnaryCall", err, st); err != nil {
		return err
	}
	stream, err := tc.FullDuplexCall(ctx)
	if err != nil {
		return fmt.Errorf("FullDuplexCall: %w", err)
	}
	if err := stream.Send(&grpc_testing.StreamingOutputCallRequest{ResponseStatus: st}); err != nil && err != io.EOF {
		return fmt.Errorf("FullDuplexCall: Send: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("FullDuplexCall: CloseSend: %w", err)
	}
	_, err = stream.Recv()
	return wantStatus("FullDuplexCall", err, st)
}

// SpecialStatusMessage: whitespace and Unicode (in and beyond the BMP) in
// a status message come back unchanged.
func SpecialStatusMessage(ctx context.Context, cc rpc.ClientConnInterface) error {
	st := &grpc_testing.EchoStatus{
		Code:    int32(codes.Unknown),
		Message: "\t\ntest with whitespace\r\nand Unicode BMP \u263a and non-BMP \U0001f608\t\n",
	}
	_, err := grpc_testing.NewTestServiceClient(cc).UnaryCall(ctx, &grpc_testing.SimpleRequest{ResponseStatus: st})
	return wantStatus("UnaryCall", err, st)
}

// UnimplementedMethod: TestService's UnimplementedCall answers
// Unimplemented.
func UnimplementedMethod(ctx context.Context, cc rpc.ClientConnInterface) error {
	_, err := grpc_testing.NewTestServiceClient(cc).UnimplementedCall(ctx, new(grpc_testing.Empty))
	return wantCode("TestService/UnimplementedCall", err, codes.Unimplemented)
}

// UnimplementedService: a service the server does not have answers
// Unimplemented.
func UnimplementedService(ctx context.Context, cc rpc.ClientConnInterface) error {
	_, err := grpc_testing.NewUnimplementedServiceClient(cc).UnimplementedCall(ctx, new(grpc_testing.Empty))
	return wantCode("UnimplementedService/UnimplementedCall", err, codes.Unimplemented)
}
