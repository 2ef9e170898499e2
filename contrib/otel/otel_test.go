package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/codes"
	rdmarpcotel "github.com/rdmarpc/rdmarpc/contrib/otel"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service answers Echo inside a span of its own, a child of the server's
// span if the handler's context carries it.
type service struct {
	testpb.UnimplementedTestServer
	tracer trace.Tracer
}

func (s service) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	_, span := s.tracer.Start(ctx, "work")
	span.End()
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

func (service) Fail(_ context.Context, in *testpb.FailRequest) (*testpb.FailResponse, error) {
	return nil, status.Error(codes.Code(in.Code), in.Message)
}

// run makes the calls f makes, client and server each with its own tracer
// and meter provider (as two processes would), and returns what they
// recorded once both have ended.
func run(t *testing.T, f func(ctx context.Context, c testpb.TestClient)) (spans tracetest.SpanStubs, client, server metricdata.ResourceMetrics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exp := tracetest.NewInMemoryExporter()
	cliTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	srvTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	cliReader, srvReader := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	cliMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(cliReader))
	srvMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(srvReader))

	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer(rpc.StatsHandler(rdmarpcotel.NewServerHandler(rdmarpcotel.WithTracerProvider(srvTP), rdmarpcotel.WithMeterProvider(srvMP))))
	testpb.RegisterTestServer(srv, service{tracer: srvTP.Tracer("test")})
	lis, err := tr.Listen("otel:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	cc, err := rpc.Dial(ctx, "pipe://"+lis.Addr().String(), rpc.WithTransport(tr),
		rpc.WithStatsHandler(rdmarpcotel.NewClientHandler(rdmarpcotel.WithTracerProvider(cliTP), rdmarpcotel.WithMeterProvider(cliMP))))
	if err != nil {
		t.Fatal(err)
	}
	f(ctx, testpb.NewTestClient(cc))
	// Both sides have ended every call once the server has stopped
	// gracefully: it waits for its handlers and for the client to leave.
	cc.Close()
	srv.GracefulStop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if err := cliReader.Collect(ctx, &client); err != nil {
		t.Fatal(err)
	}
	if err := srvReader.Collect(ctx, &server); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans(), client, server
}

func attrs(kv []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kv))
	for _, a := range kv {
		m[a.Key] = a.Value
	}
	return m
}

// wantAttrs fails unless kv holds every attribute of want.
func wantAttrs(t *testing.T, what string, kv []attribute.KeyValue, want map[attribute.Key]attribute.Value) {
	t.Helper()
	got := attrs(kv)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %v, want %v (all: %v)", what, k, got[k].String(), v.String(), kv)
		}
	}
}

func histogram[N int64 | float64](t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.HistogramDataPoint[N] {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != rdmarpcotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[N])
			if !ok || len(h.DataPoints) != 1 {
				t.Fatalf("%s: %T with %v, want one histogram point", name, m.Data, m.Data)
			}
			return h.DataPoints[0]
		}
	}
	t.Fatalf("no metric %s", name)
	return metricdata.HistogramDataPoint[N]{}
}

func TestOneCall(t *testing.T) {
	req := &testpb.EchoRequest{Payload: []byte("hello, otel")}
	spans, cli, srv := run(t, func(ctx context.Context, c testpb.TestClient) {
		if _, err := c.Echo(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (client, server, handler's): %v", len(spans), spans)
	}
	byKind := map[trace.SpanKind]tracetest.SpanStub{}
	for _, s := range spans {
		byKind[s.SpanKind] = s
	}
	client, server, work := byKind[trace.SpanKindClient], byKind[trace.SpanKindServer], byKind[trace.SpanKindInternal]
	const name = "rdmarpc.test.v1.Test/Echo"
	if client.Name != name || server.Name != name || work.Name != "work" {
		t.Errorf("span names %q, %q, %q; want %q twice and work", client.Name, server.Name, work.Name, name)
	}
	// The trace context crossed in the metadata.
	if server.Parent.SpanID() != client.SpanContext.SpanID() || server.SpanContext.TraceID() != client.SpanContext.TraceID() || !server.Parent.IsRemote() {
		t.Errorf("server span's parent %v, want the client's span %v, remote", server.Parent, client.SpanContext)
	}
	if work.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("the handler's span's parent %v, want the server's span", work.Parent)
	}
	want := map[attribute.Key]attribute.Value{
		"rpc.system":           attribute.StringValue("rdmarpc"),
		"rpc.service":          attribute.StringValue("rdmarpc.test.v1.Test"),
		"rpc.method":           attribute.StringValue("Echo"),
		"network.transport":    attribute.StringValue("pipe"),
		"rpc.grpc.status_code": attribute.Int64Value(0),
	}
	wantAttrs(t, "client span", client.Attributes, want)
	wantAttrs(t, "server span", server.Attributes, want)
	if client.Status.Code != otelcodes.Unset || server.Status.Code != otelcodes.Unset {
		t.Errorf("span statuses %v, %v; want unset", client.Status, server.Status)
	}

	size := int64(proto.Size(req))
	for _, side := range []struct {
		name string
		rm   metricdata.ResourceMetrics
	}{{"client", cli}, {"server", srv}} {
		d := histogram[float64](t, side.rm, "rpc."+side.name+".duration")
		if d.Count != 1 {
			t.Errorf("rpc.%s.duration counts %d calls, want 1", side.name, d.Count)
		}
		wantAttrs(t, "rpc."+side.name+".duration", d.Attributes.ToSlice(), want)
		for _, m := range []string{"request.size", "response.size"} {
			p := histogram[int64](t, side.rm, "rpc."+side.name+"."+m)
			if p.Count != 1 || p.Sum != size {
				t.Errorf("rpc.%s.%s: %d messages of %d bytes in all, want 1 of %d", side.name, m, p.Count, p.Sum, size)
			}
		}
		for _, m := range []string{"requests_per_rpc", "responses_per_rpc"} {
			p := histogram[int64](t, side.rm, "rpc."+side.name+"."+m)
			if p.Count != 1 || p.Sum != 1 {
				t.Errorf("rpc.%s.%s: %d calls of %d messages in all, want 1 of 1", side.name, m, p.Count, p.Sum)
			}
		}
	}
}

func TestFailedCall(t *testing.T) {
	spans, _, srv := run(t, func(ctx context.Context, c testpb.TestClient) {
		_, err := c.Fail(ctx, &testpb.FailRequest{Code: uint32(codes.NotFound), Message: "no such thing"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("Fail: %v", err)
		}
	})
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, s := range spans {
		wantAttrs(t, s.SpanKind.String()+" span", s.Attributes, map[attribute.Key]attribute.Value{"rpc.grpc.status_code": attribute.Int64Value(int64(codes.NotFound))})
		// NotFound is the caller's error, not the server's.
		want := otelcodes.Unset
		if s.SpanKind == trace.SpanKindClient {
			want = otelcodes.Error
		}
		if s.Status.Code != want {
			t.Errorf("%v span status %v, want %v", s.SpanKind, s.Status, want)
		}
	}
	if p := histogram[int64](t, srv, "rpc.server.responses_per_rpc"); p.Sum != 0 {
		t.Errorf("the server counts %d responses for a failed call, want 0", p.Sum)
	}
}
