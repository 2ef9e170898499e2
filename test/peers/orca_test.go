package peers

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/orca"
)

// costServer is gRPC-go's interop TestService whose EmptyCall records a
// cost, as gRPC-go's ORCA example server does.
type costServer struct{ testpb.TestServiceServer }

func (s costServer) EmptyCall(ctx context.Context, in *testpb.Empty) (*testpb.Empty, error) {
	orca.CallMetricsRecorderFromContext(ctx).SetRequestCost("db_queries", 10)
	return s.TestServiceServer.EmptyCall(ctx, in)
}

// TestORCAAgainstGRPCGo: rdmarpc's orca on the client (internal/orcaclient,
// a balancer shaped as gRPC-go's example) against gRPC-go's orca on the
// server, over grpc://: each call's report, sent by gRPC-go in its
// trailer, reaches the picker's Done, and gRPC-go's out-of-band service's
// first report reaches the SubConn's listener.
func TestORCAAgainstGRPCGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds orcaclient")
	}
	bin := build(t, "orcaclient")
	smr := orca.NewServerMetricsRecorder()
	smr.SetCPUUtilization(0.5)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(orca.CallMetricsServerOption(nil))
	testpb.RegisterTestServiceServer(s, costServer{interop.NewTestServer()})
	if err := orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: smr}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-addr", "grpc://"+lis.Addr().String(), "-calls", "3").CombinedOutput()
	t.Logf("orcaclient:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("per-call: map[db_queries:10]\n", 3) + "oob: cpu_utilization=0.5\n"
	if string(out) != want {
		t.Fatalf("orcaclient printed %q, want %q", out, want)
	}
}
