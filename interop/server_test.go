package interop

import (
	"context"
	"io"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// A client cannot make the server allocate what it likes: sizes past
// MaxPayload, negative sizes and HalfDuplexCall's held requests past
// MaxBuffered fail before the memory is taken.
func TestServerBounds(t *testing.T) {
	cc := serve(t, pipe.New(pipe.Options{}), "bounds", NewTestServer(ServerOptions{MaxPayload: 1 << 10, MaxBuffered: 4 << 10}))
	tc := grpc_testing.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	for _, size := range []int32{1<<10 + 1, -1, 1<<31 - 1} {
		_, err := tc.UnaryCall(ctx, &grpc_testing.SimpleRequest{ResponseSize: size})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("UnaryCall for %d bytes: %v, want InvalidArgument", size, err)
		}
	}
	stream, err := tc.StreamingOutputCall(ctx, &grpc_testing.StreamingOutputCallRequest{
		ResponseParameters: []*grpc_testing.ResponseParameters{{Size: 10}, {Size: 1<<10 + 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first response: %v", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("second response, too large: %v, want InvalidArgument", err)
	}

	hd, err := tc.HalfDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 8 { // 8 KiB of payloads against a 4 KiB bound
		if err := hd.Send(&grpc_testing.StreamingOutputCallRequest{Payload: zeros(1 << 10)}); err != nil {
			break // the server ended the call
		}
	}
	hd.CloseSend()
	if _, err := hd.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("HalfDuplexCall past MaxBuffered: %v, want ResourceExhausted", err)
	}
}

// HalfDuplexCall answers only after the half-close, every request's
// responses in order.
func TestHalfDuplexCall(t *testing.T) {
	cc := serve(t, pipe.New(pipe.Options{}), "half", NewTestServer(ServerOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	stream, err := grpc_testing.NewTestServiceClient(cc).HalfDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int32{3, 1, 4, 1, 5}
	for _, n := range sizes {
		req := &grpc_testing.StreamingOutputCallRequest{ResponseParameters: []*grpc_testing.ResponseParameters{{Size: n}}}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got := len(r.GetPayload().GetBody()); got != int(n) {
			t.Fatalf("response %d: %d bytes, want %d", i, got, n)
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after the responses: %v, want io.EOF", err)
	}
}
