package prometheus_test

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rdmarpc/rdmarpc/codes"
	rpcprom "github.com/rdmarpc/rdmarpc/contrib/prometheus"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
)

// unaryEvents are the events of one unary call on one side, in the order
// the RPC layer reports them, made once: what they cost the RPC layer is
// not the handler's.
func unaryEvents(client bool) []stats.RPCStats {
	now := time.Now()
	return []stats.RPCStats{
		&stats.Begin{Client: client, BeginTime: now},
		&stats.OutHeader{Client: client},
		&stats.OutPayload{Client: client, Length: 64},
		&stats.InHeader{Client: client},
		&stats.InPayload{Client: client, Length: 64},
		&stats.OutTrailer{Client: client},
		&stats.End{Client: client, BeginTime: now, EndTime: now.Add(time.Millisecond)},
	}
}

// oneCall tags one call and reports events to h.
func oneCall(ctx context.Context, h stats.Handler, info *stats.RPCTagInfo, events []stats.RPCStats) {
	ctx = h.TagRPC(ctx, info)
	for _, e := range events {
		h.HandleRPC(ctx, e)
	}
}

type handler interface {
	stats.Handler
	prom.Collector
}

func sides() []struct {
	name   string
	client bool
	h      func() handler
} {
	return []struct {
		name   string
		client bool
		h      func() handler
	}{
		{"server", false, func() handler { return rpcprom.NewServerMetrics(rpcprom.Options{}) }},
		{"client", true, func() handler { return rpcprom.NewClientMetrics(rpcprom.Options{}) }},
	}
}

// BenchmarkHandleRPC is what the metrics cost one unary call's events, on
// each side, the call's method already seen: TagRPC and the seven events.
func BenchmarkHandleRPC(b *testing.B) {
	for _, side := range sides() {
		b.Run(side.name, func(b *testing.B) {
			h := side.h()
			prom.NewRegistry().MustRegister(h)
			ctx, events := context.Background(), unaryEvents(side.client)
			info := &stats.RPCTagInfo{FullMethodName: "/rdmarpc.test.v1.Test/Echo"}
			oneCall(ctx, h, info, events)
			b.ReportAllocs()
			for b.Loop() {
				oneCall(ctx, h, info, events)
			}
		})
	}
}

// TestHandleRPCAllocs: a call to a method already seen costs the metrics
// one allocation, its context, whatever its events.
func TestHandleRPCAllocs(t *testing.T) {
	for _, side := range sides() {
		t.Run(side.name, func(t *testing.T) {
			h := side.h()
			prom.NewRegistry().MustRegister(h)
			ctx, events := context.Background(), unaryEvents(side.client)
			info := &stats.RPCTagInfo{FullMethodName: "/rdmarpc.test.v1.Test/Echo"}
			oneCall(ctx, h, info, events)
			// The call's context is the one allocation a call needs: the
			// series are resolved once per method.
			if n := testing.AllocsPerRun(1000, func() { oneCall(ctx, h, info, events) }); n > 1 {
				t.Errorf("one unary call's events allocate %v times, want at most 1", n)
			}
		})
	}
}

// TestTwoServerMetrics: two handlers of one side, each with its registry
// (say, one per team), each count every call once, in their own series.
func TestTwoServerMetrics(t *testing.T) {
	a, b := rpcprom.NewServerMetrics(rpcprom.Options{}), rpcprom.NewServerMetrics(rpcprom.Options{})
	ra, rb := prom.NewPedanticRegistry(), prom.NewPedanticRegistry()
	ra.MustRegister(a)
	rb.MustRegister(b)
	info := &stats.RPCTagInfo{FullMethodName: "/rdmarpc.test.v1.Test/Echo"}
	for range 3 {
		// As the RPC layer does: each handler tags the call in turn, and
		// each sees every event with the last context.
		ctx := b.TagRPC(a.TagRPC(context.Background(), info), info)
		for _, e := range unaryEvents(false) {
			a.HandleRPC(ctx, e)
			b.HandleRPC(ctx, e)
		}
	}
	const want = `
# HELP grpc_server_msg_received_total Total number of RPC stream messages received on the server.
# TYPE grpc_server_msg_received_total counter
grpc_server_msg_received_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 3
# HELP grpc_server_msg_sent_total Total number of gRPC stream messages sent by the server.
# TYPE grpc_server_msg_sent_total counter
grpc_server_msg_sent_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 3
# HELP grpc_server_started_total Total number of RPCs started on the server.
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="Echo",grpc_service="rdmarpc.test.v1.Test",grpc_type="unary"} 3
`
	for name, reg := range map[string]*prom.Registry{"a": ra, "b": rb} {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"grpc_server_started_total", "grpc_server_msg_received_total", "grpc_server_msg_sent_total"); err != nil {
			t.Errorf("handler %s: %v", name, err)
		}
	}
}

// TestFirstCallsConcurrent: the first calls to methods, racing, count in
// the same series as the calls after them.
func TestFirstCallsConcurrent(t *testing.T) {
	h := rpcprom.NewServerMetrics(rpcprom.Options{})
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(h)
	const workers, calls = 4, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			events := unaryEvents(false)
			for i := range calls {
				oneCall(context.Background(), h, &stats.RPCTagInfo{FullMethodName: fmt.Sprintf("/s.S/M%d", i%5)}, events)
			}
		})
	}
	wg.Wait()
	for _, name := range []string{"grpc_server_started_total", "grpc_server_handled_total", "grpc_server_handling_seconds"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 5 {
			t.Errorf("%s: %d series (%v), want 5", name, n, err)
		}
	}
	for method, n := range byMethod(t, reg, "grpc_server_started_total") {
		if n != workers*calls/5 {
			t.Errorf("%s started %v times, want %v", method, n, workers*calls/5)
		}
	}
}

// byMethod is the values of counter name's series by grpc_method.
func byMethod(t *testing.T, reg prom.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" {
					got[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

// TestUnknownMethodsBounded: a flood of distinct method names (from a
// program that calls whatever its peer names, say) makes no more series,
// nor keeps more memory, than Options.MaxMethods allow; the calls past
// the bound are counted, as "unknown".
func TestUnknownMethodsBounded(t *testing.T) {
	const max, flood = 64, 20000
	h := rpcprom.NewClientMetrics(rpcprom.Options{MaxMethods: max})
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(h)
	events := unaryEvents(true)
	call := func(i int) {
		oneCall(context.Background(), h, &stats.RPCTagInfo{FullMethodName: fmt.Sprintf("/flood.S/M%d", i)}, events)
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for i := range flood {
		call(i)
	}
	before := heap()
	for i := range flood {
		call(flood + i)
	}
	// Each method past the bound would have kept five series (a
	// histogram's among them: over a kilobyte) and its map entry: 20000
	// more of them tens of megabytes. Bounded, the second flood keeps
	// nothing; 4 MiB is room for the runtime's own.
	if after := heap(); after > before+4<<20 {
		t.Errorf("the heap grew from %d to %d bytes over %d more unknown methods", before, after, flood)
	}
	if n := h.KnownMethods(); n != max {
		t.Errorf("%d methods kept, want %d", n, max)
	}
	for _, name := range []string{"grpc_client_started_total", "grpc_client_msg_sent_total", "grpc_client_handled_total", "grpc_client_handling_seconds"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != max+1 {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, max+1)
		}
	}
	if got := byMethod(t, reg, "grpc_client_started_total")["unknown"]; got != 2*flood-max {
		t.Errorf("%v calls counted as unknown, want %d", got, 2*flood-max)
	}
}

// TestUnknownCodesBounded: codes past Unauthenticated, which only a peer
// that does not follow the protocol sends, are counted as Unknown rather
// than one series per number.
func TestUnknownCodesBounded(t *testing.T) {
	h := rpcprom.NewClientMetrics(rpcprom.Options{})
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(h)
	info := &stats.RPCTagInfo{FullMethodName: "/rdmarpc.test.v1.Test/Fail"}
	now := time.Now()
	const flood = 1000
	for c := range flood {
		ctx := h.TagRPC(context.Background(), info)
		h.HandleRPC(ctx, &stats.Begin{Client: true, BeginTime: now})
		h.HandleRPC(ctx, &stats.End{Client: true, BeginTime: now, EndTime: now, Error: status.Error(codes.Code(c), "x")})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_client_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_code" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	// OK is nil's code: status.Error(OK) is no error.
	if len(got) != int(codes.Unauthenticated)+1 || got["OK"] != 1 || got["NotFound"] != 1 || got["Unknown"] != float64(flood-int(codes.Unauthenticated)) {
		t.Errorf("handled by code: %v, want each of the 17 codes once, Unknown also for the %d past them", got, flood-int(codes.Unauthenticated)-1)
	}
}

// TestMalformedMethodNames: names not of the shape /service/method are
// counted as unknown, as go-grpc-prometheus does, and kept in no map.
func TestMalformedMethodNames(t *testing.T) {
	h := rpcprom.NewServerMetrics(rpcprom.Options{})
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(h)
	events := unaryEvents(false)
	for _, name := range []string{"", "Echo", "/Echo", "//", "/s.S/M"} {
		oneCall(context.Background(), h, &stats.RPCTagInfo{FullMethodName: name}, events)
	}
	if got, want := byMethod(t, reg, "grpc_server_started_total"), map[string]float64{"unknown": 3, "": 1, "M": 1}; !maps.Equal(got, want) {
		t.Errorf("started by method: %v, want %v", got, want)
	}
	if n := h.KnownMethods(); n != 2 {
		t.Errorf("%d methods kept, want 2 (// and /s.S/M)", n)
	}
}
