package peers

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
)

// TestClientInteropCases runs gRPC-go's own interop client cases (its
// interop package's DoX functions, which fail the process on a wrong
// answer) through an rdmarpc ClientConn on a grpc:// target, against
// gRPC-go's interop TestService: every case that needs no Google
// account, ORCA or xDS, and that takes a client interface (unimplemented
// method wants a *grpc.ClientConn; the project's own case covers it in
// TestClientStatus).
func TestClientInteropCases(t *testing.T) {
	addr, _ := grpcgoServer(t)
	cc := grpcgo.NewClient(rdmarpcClient(t, "grpc://"+addr))
	tc := testpb.NewTestServiceClient(cc)
	for _, c := range []struct {
		name string
		do   func(context.Context, testpb.TestServiceClient)
	}{
		{"empty_unary", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoEmptyUnaryCall(ctx, tc) }},
		{"large_unary", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoLargeUnaryCall(ctx, tc) }},
		{"client_streaming", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoClientStreaming(ctx, tc) }},
		{"server_streaming", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoServerStreaming(ctx, tc) }},
		{"ping_pong", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoPingPong(ctx, tc) }},
		{"empty_stream", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoEmptyStream(ctx, tc) }},
		{"timeout_on_sleeping_server", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoTimeoutOnSleepingServer(ctx, tc) }},
		{"cancel_after_begin", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoCancelAfterBegin(ctx, tc) }},
		{"cancel_after_first_response", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoCancelAfterFirstResponse(ctx, tc) }},
		{"custom_metadata", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoCustomMetadata(ctx, tc) }},
		{"status_code_and_message", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoStatusCodeAndMessage(ctx, tc) }},
		{"special_status_message", func(ctx context.Context, tc testpb.TestServiceClient) { interop.DoSpecialStatusMessage(ctx, tc) }},
		{"unimplemented_service", func(ctx context.Context, _ testpb.TestServiceClient) {
			interop.DoUnimplementedService(ctx, testpb.NewUnimplementedServiceClient(cc))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c.do(ctx, tc)
		})
	}
}
