package prometheus_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	rpcprom "github.com/rdmarpc/rdmarpc/contrib/prometheus"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type echo struct{ testpb.UnimplementedTestServer }

func (echo) Echo(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

func (echo) Fail(_ context.Context, in *testpb.FailRequest) (*testpb.FailResponse, error) {
	return nil, status.Error(codes.Code(in.Code), in.Message)
}

// A server-streaming method of the test's own.
var listDesc = rpc.ServiceDesc{
	ServiceName: "prom.Streams",
	HandlerType: (*any)(nil),
	Streams: []rpc.StreamDesc{{StreamName: "List", ServerStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
		in := new(testpb.EchoRequest)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		for range 3 {
			if err := ss.SendMsg(&testpb.EchoResponse{}); err != nil {
				return err
			}
		}
		return nil
	}}},
}

// counted is a transport whose connections count, as rdma's do.
type counted struct{ transport.Transport }

type countedConn struct{ transport.Conn }

func (countedConn) Counters() map[string]uint64 {
	return map[string]uint64{"credit_waits": 3, "recvs_posted": 40}
}

// Gauges are levels: exported as gauges, not counters.
func (countedConn) Gauges() map[string]uint64 {
	return map[string]uint64{"registered_bytes": 4096}
}

func (t counted) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := t.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return countedConn{c}, nil
}

func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvMetrics, cliMetrics, trMetrics := rpcprom.NewServerMetrics(rpcprom.Options{}), rpcprom.NewClientMetrics(rpcprom.Options{}), rpcprom.NewTransportMetrics()
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(srvMetrics, cliMetrics, trMetrics)

	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer(rpc.StatsHandler(srvMetrics), rpc.StatsHandler(cliMetrics))
	testpb.RegisterTestServer(srv, echo{})
	srv.RegisterService(&listDesc, struct{}{})
	lis, err := tr.Listen("prom:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	cc, err := rpc.Dial(ctx, "pipe://"+lis.Addr().String(), rpc.WithTransport(counted{tr}),
		rpc.WithStatsHandler(cliMetrics), rpc.WithStatsHandler(srvMetrics), rpc.WithStatsHandler(trMetrics))
	if err != nil {
		t.Fatal(err)
	}
	c := testpb.NewTestClient(cc)
	for range 2 {
		if _, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Fail(ctx, &testpb.FailRequest{Code: uint32(codes.NotFound)}); status.Code(err) != codes.NotFound {
		t.Fatalf("Fail: %v", err)
	}
	cs, err := cc.NewStream(ctx, &listDesc.Streams[0], "/prom.Streams/List")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	for {
		err := cs.RecvMsg(new(testpb.EchoResponse))
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The client's side is counted when its calls return; the server's
	// once its handlers have ended: the connection's close waits for them.
	cc.Close()
	srv.GracefulStop()

	const want = `
# HELP grpc_client_handled_total Total number of RPCs completed by the client, regardless of success or failure.
# TYPE grpc_client_handled_total counter
grpc_client_handled_total{grpc_code="NotFound",grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 1
grpc_client_handled_total{grpc_code="OK",grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_client_handled_total{grpc_code="OK",grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 1
# HELP grpc_client_msg_received_total Total number of RPC stream messages received by the client.
# TYPE grpc_client_msg_received_total counter
grpc_client_msg_received_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_client_msg_received_total{grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 0
grpc_client_msg_received_total{grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 3
# HELP grpc_client_msg_sent_total Total number of gRPC stream messages sent by the client.
# TYPE grpc_client_msg_sent_total counter
grpc_client_msg_sent_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_client_msg_sent_total{grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 1
grpc_client_msg_sent_total{grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 1
# HELP grpc_client_started_total Total number of RPCs started on the client.
# TYPE grpc_client_started_total counter
grpc_client_started_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_client_started_total{grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 1
grpc_client_started_total{grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 1
# HELP grpc_server_handled_total Total number of RPCs completed on the server, regardless of success or failure.
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="NotFound",grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 1
grpc_server_handled_total{grpc_code="OK",grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_server_handled_total{grpc_code="OK",grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 1
# HELP grpc_server_msg_received_total Total number of RPC stream messages received on the server.
# TYPE grpc_server_msg_received_total counter
grpc_server_msg_received_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_server_msg_received_total{grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 1
grpc_server_msg_received_total{grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 1
# HELP grpc_server_msg_sent_total Total number of gRPC stream messages sent by the server.
# TYPE grpc_server_msg_sent_total counter
grpc_server_msg_sent_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_server_msg_sent_total{grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 0
grpc_server_msg_sent_total{grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 3
# HELP grpc_server_started_total Total number of RPCs started on the server.
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 2
grpc_server_started_total{grpc_method="Fail",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 1
grpc_server_started_total{grpc_method="List",grpc_service="prom.Streams",grpc_type="server_stream"} 1
# HELP rdmarpc_transport_credit_waits_total Transport counter credit_waits.
# TYPE rdmarpc_transport_credit_waits_total counter
rdmarpc_transport_credit_waits_total{scheme="pipe"} 3
# HELP rdmarpc_transport_recvs_posted_total Transport counter recvs_posted.
# TYPE rdmarpc_transport_recvs_posted_total counter
rdmarpc_transport_recvs_posted_total{scheme="pipe"} 40
# HELP rdmarpc_transport_registered_bytes Transport level registered_bytes.
# TYPE rdmarpc_transport_registered_bytes gauge
rdmarpc_transport_registered_bytes{scheme="pipe"} 4096
`
	names := []string{
		"grpc_server_started_total", "grpc_server_handled_total", "grpc_server_msg_received_total", "grpc_server_msg_sent_total",
		"grpc_client_started_total", "grpc_client_handled_total", "grpc_client_msg_received_total", "grpc_client_msg_sent_total",
		"rdmarpc_transport_credit_waits_total", "rdmarpc_transport_recvs_posted_total", "rdmarpc_transport_registered_bytes",
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// One observation per call in each histogram: 4 calls each side.
	for _, name := range []string{"grpc_server_handling_seconds", "grpc_client_handling_seconds"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 3 {
			t.Errorf("%s: %d series (%v), want 3", name, n, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasSuffix(mf.GetName(), "_handling_seconds") {
			continue
		}
		var calls uint64
		for _, m := range mf.GetMetric() {
			calls += m.GetHistogram().GetSampleCount()
		}
		if calls != 4 {
			t.Errorf("%s counts %d calls, want 4", mf.GetName(), calls)
		}
	}
}
