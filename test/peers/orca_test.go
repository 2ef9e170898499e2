package peers

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	gbalancer "google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/orca"
	"google.golang.org/protobuf/types/known/durationpb"
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

// TestORCAServerForGRPCGo: gRPC-go's orca on the client against rdmarpc's
// on the server (internal/orcaserver): gRPC-go's picker's Done (a balancer
// shaped as its example) parses rdmarpc's per-call trailer, and gRPC-go's
// generated OpenRcaService client gets rdmarpc's out-of-band report. (Its
// OOBListener is not used: with gRPC-go v1.85 it got no report within
// 45 s from gRPC-go's own example server either, whose example shows
// out-of-band reports only with an internal option.)
func TestORCAServerForGRPCGo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds orcaserver")
	}
	s := startCmd(t, "orcaserver", nil, false)
	cc, err := grpc.NewClient(s.tcp, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"orca_peer_grpcgo":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	c := testpb.NewTestServiceClient(cc)
	for i := range 3 {
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint((<-grpcgoORCA).GetRequestCost()); got != "map[db_queries:10]" {
			t.Errorf("call %d: gRPC-go's Done saw request cost %s, want map[db_queries:10]", i, got)
		}
	}
	stream, err := v3orcaservicegrpc.NewOpenRcaServiceClient(cc).StreamCoreMetrics(ctx, &v3orcaservicegrpc.OrcaLoadReportRequest{ReportInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || r.GetCpuUtilization() != 0.25 {
		t.Fatalf("out-of-band report %v, %v; want CPU utilization 0.25", r, err)
	}
}

// grpcgoORCA gets each report gRPC-go's picker's Done saw in
// TestORCAServerForGRPCGo.
var grpcgoORCA = make(chan *v3orcapb.OrcaLoadReport, 10)

func init() { gbalancer.Register(grpcgoORCABuilder{}) }

type grpcgoORCABuilder struct{}

func (grpcgoORCABuilder) Name() string { return "orca_peer_grpcgo" }
func (grpcgoORCABuilder) Build(cc gbalancer.ClientConn, _ gbalancer.BuildOptions) gbalancer.Balancer {
	return &grpcgoORCALB{cc: cc}
}

type grpcgoORCALB struct {
	cc gbalancer.ClientConn
	sc gbalancer.SubConn
}

func (b *grpcgoORCALB) UpdateClientConnState(s gbalancer.ClientConnState) error {
	if b.sc != nil {
		return nil
	}
	//lint:ignore SA1019 the shape of gRPC-go's own ORCA example, one address
	sc, err := b.cc.NewSubConn(s.ResolverState.Addresses, gbalancer.NewSubConnOptions{
		StateListener: func(st gbalancer.SubConnState) {
			if st.ConnectivityState == connectivity.Ready {
				b.cc.UpdateState(gbalancer.State{ConnectivityState: connectivity.Ready, Picker: grpcgoORCAPicker{b.sc}})
			}
		},
	})
	if err != nil {
		return err
	}
	b.sc = sc
	sc.Connect()
	return nil
}

func (b *grpcgoORCALB) ResolverError(error)                                          {}
func (b *grpcgoORCALB) UpdateSubConnState(gbalancer.SubConn, gbalancer.SubConnState) {}
func (b *grpcgoORCALB) ExitIdle()                                                    {}
func (b *grpcgoORCALB) Close()                                                       {}

type grpcgoORCAPicker struct{ sc gbalancer.SubConn }

func (p grpcgoORCAPicker) Pick(gbalancer.PickInfo) (gbalancer.PickResult, error) {
	return gbalancer.PickResult{SubConn: p.sc, Done: func(di gbalancer.DoneInfo) {
		r, _ := di.ServerLoad.(*v3orcapb.OrcaLoadReport)
		grpcgoORCA <- r
	}}, nil
}
