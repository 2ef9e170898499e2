package orca_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
	"github.com/rdmarpc/rdmarpc/orca"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// costService records a cost for each Echo, as gRPC-go's ORCA example
// server does.
type costService struct{ testpb.UnimplementedTestServer }

func (costService) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	cmr := orca.CallMetricsRecorderFromContext(ctx)
	if cmr == nil {
		return nil, status.Error(codes.Internal, "no call metrics recorder")
	}
	cmr.SetRequestCost("db_queries", 10)
	cmr.SetNamedMetric("payload", float64(len(in.Payload)))
	return &testpb.EchoResponse{}, nil
}

// costStreamDesc is a streaming method whose handler records as cost the
// number of messages it received.
var costStreamDesc = rpc.ServiceDesc{
	ServiceName: "orca.test.Costs",
	Streams: []rpc.StreamDesc{{StreamName: "Count", ClientStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
		n := 0
		for {
			if err := ss.RecvMsg(new(testpb.EchoRequest)); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			n++
		}
		orca.CallMetricsRecorderFromContext(ss.Context()).SetRequestCost("messages", float64(n))
		return ss.SendMsg(&testpb.EchoResponse{})
	}}},
}

// reports is what the test balancer saw: per-call reports (from Done)
// and out-of-band ones (from its listener).
type reports struct {
	perCall chan balancer.DoneInfo
	oob     chan *v3orcapb.OrcaLoadReport
}

var seen = reports{perCall: make(chan balancer.DoneInfo, 100), oob: make(chan *v3orcapb.OrcaLoadReport, 100)}

func init() { balancer.Register(orcaLBBuilder{}) }

// orcaLBBuilder is a balancer shaped as gRPC-go's ORCA example's: one
// SubConn, an OOB listener on it, a picker whose Done reads the report.
type orcaLBBuilder struct{}

func (orcaLBBuilder) Name() string { return "orca_test" }
func (orcaLBBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &orcaLB{cc: cc}
}

type orcaLB struct {
	cc balancer.ClientConn
	sc balancer.SubConn
}

func (o *orcaLB) UpdateClientConnState(ccs balancer.ClientConnState) error {
	if o.sc != nil {
		return nil
	}
	sc, err := o.cc.NewSubConn(ccs.ResolverState.Addresses, balancer.NewSubConnOptions{
		StateListener: func(scs balancer.SubConnState) {
			if scs.ConnectivityState == connectivity.Ready {
				o.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: picker{o.sc}})
			}
		},
	})
	if err != nil {
		return err
	}
	o.sc = sc
	sc.Connect()
	// As gRPC-go's example, the balancer never stops the listener: the
	// SubConn's shutdown at the ClientConn's Close does.
	orca.RegisterOOBListener(sc, listener{}, orca.OOBListenerOptions{ReportInterval: time.Millisecond})
	return nil
}

func (o *orcaLB) ResolverError(error)                                        {}
func (o *orcaLB) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (o *orcaLB) ExitIdle()                                                  {}
func (o *orcaLB) Close()                                                     {}

type picker struct{ sc balancer.SubConn }

func (p picker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc, Done: func(di balancer.DoneInfo) { seen.perCall <- di }}, nil
}

type listener struct{}

func (listener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	select {
	case seen.oob <- r:
	default: // the test stopped reading
	}
}

// serve serves costService with per-call metrics and the out-of-band
// service (reporting smr every few milliseconds) over tcp://.
func serve(t *testing.T, smr orca.ServerMetricsRecorder) string {
	t.Helper()
	srv := rpc.NewServer(orca.CallMetricsServerOption(nil))
	testpb.RegisterTestServer(srv, costService{})
	srv.RegisterService(&costStreamDesc, struct{}{})
	opts := orca.ServiceOptions{ServerMetricsProvider: smr}
	orca.AllowAnyMinReportingInterval(&opts, 5*time.Millisecond)
	if err := orca.Register(srv, opts); err != nil {
		t.Fatal(err)
	}
	lis, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// TestPerCallAndOOBReports: over tcp://, a custom balancer's Done sees each
// call's report (what the handler recorded, as gRPC-go's trailer carries
// it) and its listener the server's out-of-band reports, which follow the
// server's metrics as they change. The balancer never stops its listener:
// closing the client stops it (goleak checks).
func TestPerCallAndOOBReports(t *testing.T) {
	smr := orca.NewServerMetricsRecorder()
	smr.SetCPUUtilization(0.5)
	addr := serve(t, smr)
	cc, err := rpc.NewClient("tcp://"+addr, rpc.WithTransportCredentials(insecure.NewCredentials()),
		rpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"orca_test":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	for i := range 3 {
		if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{Payload: make([]byte, i)}); err != nil {
			t.Fatal(err)
		}
		di := <-seen.perCall
		r, ok := di.ServerLoad.(*v3orcapb.OrcaLoadReport)
		if !ok || di.Err != nil {
			t.Fatalf("call %d: Done got ServerLoad %T (%v), err %v; want an OrcaLoadReport", i, di.ServerLoad, di.ServerLoad, di.Err)
		}
		if got := fmt.Sprint(r.GetRequestCost()); got != "map[db_queries:10]" {
			t.Errorf("call %d: request cost %s, want map[db_queries:10]", i, got)
		}
		if r.GetNamedMetrics()["payload"] != float64(i) {
			t.Errorf("call %d: named metrics %v, want payload %d", i, r.GetNamedMetrics(), i)
		}
		if len(di.Trailer.Get("endpoint-load-metrics-bin")) != 1 {
			t.Errorf("call %d: trailer %v, want endpoint-load-metrics-bin", i, di.Trailer)
		}
	}
	// The same call as a stream (its Done comes from the stream's end).
	cs, err := cc.NewStream(testCtx(t), &rpc.StreamDesc{}, testpb.Test_Echo_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(testpb.EchoResponse)); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(testpb.EchoResponse)); err != io.EOF {
		t.Fatalf("the stream's end: %v, want io.EOF", err)
	}
	if di := <-seen.perCall; fmt.Sprint(loadOf(di).GetRequestCost()) != "map[db_queries:10]" {
		t.Errorf("the stream's Done got %v", di.ServerLoad)
	}
	// A streaming handler's recorder reaches the client too.
	cs, err = cc.NewStream(testCtx(t), &costStreamDesc.Streams[0], "/orca.test.Costs/Count")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := cs.SendMsg(&testpb.EchoRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(testpb.EchoResponse)); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(testpb.EchoResponse)); err != io.EOF {
		t.Fatalf("the stream's end: %v, want io.EOF", err)
	}
	if di := <-seen.perCall; fmt.Sprint(loadOf(di).GetRequestCost()) != "map[messages:3]" {
		t.Errorf("the streaming handler's report: %v, want request cost messages 3", di.ServerLoad)
	}
	// A handler that never asks for its recorder sends no report.
	if _, err := c.Block(testCtx(t), &testpb.BlockRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Block: %v, want Unimplemented", err)
	}
	if di := <-seen.perCall; di.ServerLoad != nil || di.Trailer.Get("endpoint-load-metrics-bin") != nil {
		t.Errorf("a handler that recorded nothing: ServerLoad %v, trailer %v; want none", di.ServerLoad, di.Trailer)
	}
	ctx := testCtx(t)
	waitOOB := func(cpu float64) {
		t.Helper()
		for {
			select {
			case r := <-seen.oob:
				if r.GetCpuUtilization() == cpu {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no out-of-band report with CPU utilization %v", cpu)
			}
		}
	}
	waitOOB(0.5)
	smr.SetCPUUtilization(0.9)
	waitOOB(0.9)
}

// loadOf is di's report, nil when it has none.
func loadOf(di balancer.DoneInfo) *v3orcapb.OrcaLoadReport {
	r, _ := di.ServerLoad.(*v3orcapb.OrcaLoadReport)
	return r
}

// TestRecorder: values out of range are ignored, deletions unset, and a
// report merges the call's metrics over the server's.
func TestRecorder(t *testing.T) {
	r := orca.NewServerMetricsRecorder()
	r.SetCPUUtilization(-1)
	r.SetMemoryUtilization(1.5)
	r.SetQPS(3)
	r.SetNamedUtilization("disk", 2)
	r.SetNamedUtilization("net", 0.25)
	m := r.ServerMetrics()
	if m.CPUUtilization != -1 || m.MemUtilization != -1 || m.QPS != 3 || fmt.Sprint(m.Utilization) != "map[net:0.25]" {
		t.Fatalf("recorded %+v", m)
	}
	r.DeleteQPS()
	r.DeleteNamedUtilization("net")
	if m := r.ServerMetrics(); m.QPS != -1 || len(m.Utilization) != 0 {
		t.Fatalf("after the deletions %+v", m)
	}
}

// TestParseTrailer: a trailer without the key, or with bytes that are not
// a report, gives no load; a report gives itself.
func TestParseTrailer(t *testing.T) {
	b, err := proto.Marshal(&v3orcapb.OrcaLoadReport{CpuUtilization: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		md   map[string][]string
		want string
	}{
		{nil, "<nil>"},
		{map[string][]string{"other": {"x"}}, "<nil>"},
		{map[string][]string{"endpoint-load-metrics-bin": {"\xff\xff"}}, "<nil>"},
		{map[string][]string{"endpoint-load-metrics-bin": {string(b)}}, "0.25"},
	} {
		got := "<nil>"
		if r, ok := orca.ParseTrailer(tc.md).(*v3orcapb.OrcaLoadReport); ok {
			got = fmt.Sprint(r.GetCpuUtilization())
		}
		if got != tc.want {
			t.Errorf("%v: %s, want %s", tc.md, got, tc.want)
		}
	}
}

// FuzzParseTrailer: the per-call report comes from the network; any bytes
// parse or give no load, never panic.
func FuzzParseTrailer(f *testing.F) {
	b, _ := proto.Marshal(&v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, RequestCost: map[string]float64{"a": 1}})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		orca.ParseTrailer(map[string][]string{"endpoint-load-metrics-bin": {string(b)}})
	})
}

// chanListener sends each report to its channel, dropping what the test
// does not read.
type chanListener chan *v3orcapb.OrcaLoadReport

func (c chanListener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	select {
	case c <- r:
	default:
	}
}

// twoListeners registers two listeners on its SubConn and hands the test
// their stops; two holds the channels every balancer built shares.
type twoListeners struct {
	a, b  chanListener
	stops chan func()
	cc    balancer.ClientConn
	sc    balancer.SubConn
}

var two = &twoListeners{a: make(chanListener, 1), b: make(chanListener, 1), stops: make(chan func(), 2)}

func init() { balancer.Register(twoBuilder{}) }

type twoBuilder struct{}

func (twoBuilder) Name() string { return "orca_two" }
func (twoBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &twoListeners{a: two.a, b: two.b, stops: two.stops, cc: cc}
}

func (o *twoListeners) UpdateClientConnState(ccs balancer.ClientConnState) error {
	if o.sc != nil {
		return nil
	}
	sc, err := o.cc.NewSubConn(ccs.ResolverState.Addresses, balancer.NewSubConnOptions{
		StateListener: func(scs balancer.SubConnState) {
			if scs.ConnectivityState == connectivity.Ready {
				o.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: picker{o.sc}})
			}
		},
	})
	if err != nil {
		return err
	}
	o.sc = sc
	sc.Connect()
	o.stops <- orca.RegisterOOBListener(sc, o.a, orca.OOBListenerOptions{ReportInterval: time.Millisecond})
	o.stops <- orca.RegisterOOBListener(sc, o.b, orca.OOBListenerOptions{ReportInterval: time.Hour})
	return nil
}

func (o *twoListeners) ResolverError(error)                                        {}
func (o *twoListeners) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (o *twoListeners) ExitIdle()                                                  {}
func (o *twoListeners) Close()                                                     {}

// TestOOBListenersShareAStream: two listeners of one SubConn get the reports
// of one stream at the shorter interval they asked (several reports reach
// the one that asked an hour); once the shorter one stops, the stream is
// opened again at the other's interval and its first report comes at once;
// stopping twice does nothing; goleak checks that nothing is left.
func TestOOBListenersShareAStream(t *testing.T) {
	smr := orca.NewServerMetricsRecorder()
	smr.SetEPS(7)
	addr := serve(t, smr)
	cc, err := rpc.NewClient("tcp://"+addr, rpc.WithTransportCredentials(insecure.NewCredentials()),
		rpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"orca_two":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	ctx := testCtx(t)
	stopA, stopB := <-two.stops, <-two.stops
	recv := func(c chanListener, what string) {
		t.Helper()
		// Drop a report that may have been queued before, then wait for
		// a new one.
		select {
		case <-c:
		default:
		}
		select {
		case r := <-c:
			if r.GetEps() != 7 {
				t.Fatalf("%s: report %v, want eps 7", what, r)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no report", what)
		}
	}
	for range 3 { // several reports each: the 1 ms stream, not only its first
		recv(two.a, "listener a")
		recv(two.b, "listener b")
	}
	stopA()
	recv(two.b, "listener b after a stopped")
	stopB()
	stopB() // a second stop does nothing
}
