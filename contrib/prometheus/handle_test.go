package prometheus_test

import (
	"context"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	rpcprom "github.com/rdmarpc/rdmarpc/contrib/prometheus"
	"github.com/rdmarpc/rdmarpc/stats"
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

// oneCall tags one call to method and reports events to h.
func oneCall(ctx context.Context, h stats.Handler, method string, events []stats.RPCStats) {
	ctx = h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
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
			oneCall(ctx, h, "/rdmarpc.test.v1.Test/Echo", events)
			b.ReportAllocs()
			for b.Loop() {
				oneCall(ctx, h, "/rdmarpc.test.v1.Test/Echo", events)
			}
		})
	}
}
