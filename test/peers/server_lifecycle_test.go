package peers

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc/connectivity"
	gtesting "google.golang.org/grpc/interop/grpc_testing"
)

// TestServerGracefulStopGRPCGo: GracefulStop sends gRPC-go's client a
// GOAWAY (its channel leaves READY), and the stream it has running goes
// on to its end; then the server exits.
func TestServerGracefulStopGRPCGo(t *testing.T) {
	s := startServer(t, true)
	cc := dial(t, s.tcp)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	stream, err := gtesting.NewTestServiceClient(cc).FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ping := func() {
		t.Helper()
		req := &gtesting.StreamingOutputCallRequest{ResponseParameters: []*gtesting.ResponseParameters{{Size: 100}}}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil || len(r.GetPayload().GetBody()) != 100 {
			t.Fatalf("Recv: %v, %v", r, err)
		}
	}
	ping()
	s.stdin.Close() // GracefulStop
	for st := cc.GetState(); st == connectivity.Ready; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			t.Fatal("the channel stayed READY: no GOAWAY")
		}
	}
	ping()
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("the stream's end: %v, want io.EOF", err)
	}
	<-s.done
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("rdmarpcserver: %v", err)
	}
	s.cmd = nil
}
