package opentelemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/codes"
	otelexp "github.com/rdmarpc/rdmarpc/experimental/opentelemetry"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/stats/opentelemetry"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMetricsAndSpans: two health checks (one OK, one NotFound) over the
// pipe transport, with the client and the server each recording:
// gRFC A66's metrics with grpc.method and grpc.status, and a client span
// whose child is the server's.
func TestMetricsAndSpans(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	o := opentelemetry.Options{
		MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp, Metrics: opentelemetry.DefaultMetrics().Add("grpc.lb.pick_first.connection_attempts_succeeded")},
		TraceOptions:   otelexp.TraceOptions{TracerProvider: tp, TextMapPropagator: propagation.TraceContext{}},
	}
	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer(opentelemetry.ServerOption(o), rpc.WaitForHandlers(true))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := tr.Listen("otel:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc, err := rpc.NewClient("passthrough:///"+lis.Addr().String(), rpc.WithTransport(tr), opentelemetry.DialOption(o))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := healthpb.NewHealthClient(cc)
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "nobody"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(nobody): %v, want NotFound", err)
	}
	cc.Close()
	srv.Stop() // waits for the handlers: the server has reported each End

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	method := attribute.String("grpc.method", "grpc.health.v1.Health/Check")
	for _, name := range opentelemetry.DefaultMetrics().Metrics() {
		data, ok := got[name]
		if !ok {
			t.Errorf("%s: not recorded", name)
			continue
		}
		switch d := data.(type) {
		case metricdata.Sum[int64]:
			if len(d.DataPoints) != 1 || d.DataPoints[0].Value != 2 || !d.DataPoints[0].Attributes.HasValue(method.Key) {
				t.Errorf("%s: %+v, want 2 calls of %v", name, d.DataPoints, method)
			}
		case metricdata.Histogram[float64]:
			checkStatuses(t, name, histAttrs(d.DataPoints))
		case metricdata.Histogram[int64]:
			checkStatuses(t, name, histAttrs(d.DataPoints))
		default:
			t.Errorf("%s: %T", name, data)
		}
	}
	if _, ok := got["grpc.lb.pick_first.connection_attempts_succeeded"]; ok {
		t.Error("a balancer metric was recorded: nothing records it")
	}

	ended := spans.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	sent, recv := byName["Sent.grpc.health.v1.Health/Check"], byName["Recv.grpc.health.v1.Health/Check"]
	if len(sent) != 2 || len(recv) != 2 {
		t.Fatalf("spans: %d Sent, %d Recv; want 2 of each (all: %d)", len(sent), len(recv), len(ended))
	}
	for _, r := range recv {
		if !r.Parent().IsValid() || r.Parent().TraceID() != r.SpanContext().TraceID() {
			t.Errorf("server span without the client's as parent")
		}
		found := false
		for _, s := range sent {
			found = found || s.SpanContext().SpanID() == r.Parent().SpanID()
		}
		if !found {
			t.Errorf("server span's parent is no client span")
		}
	}
	for _, s := range sent {
		events := map[string]int{}
		for _, e := range s.Events() {
			events[e.Name]++
		}
		if events["Outbound message"] != 1 {
			t.Errorf("client span events %v, want one Outbound message", events)
		}
	}
}

func histAttrs[N int64 | float64](dps []metricdata.HistogramDataPoint[N]) []attribute.Set {
	var out []attribute.Set
	for _, dp := range dps {
		if dp.Count != 1 {
			return nil
		}
		out = append(out, dp.Attributes)
	}
	return out
}

// checkStatuses: one call ended OK and one NOT_FOUND, both of the method.
func checkStatuses(t *testing.T, name string, sets []attribute.Set) {
	t.Helper()
	statuses := map[string]bool{}
	for _, s := range sets {
		v, _ := s.Value("grpc.status")
		m, _ := s.Value("grpc.method")
		if m.AsString() != "grpc.health.v1.Health/Check" {
			t.Errorf("%s: grpc.method %q", name, m.AsString())
		}
		statuses[v.AsString()] = true
	}
	if len(sets) != 2 || !statuses["OK"] || !statuses["NOT_FOUND"] {
		t.Errorf("%s: %v, want one call OK and one NOT_FOUND", name, sets)
	}
}
