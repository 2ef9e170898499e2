package prometheus_test

import (
	"context"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	rpcprom "github.com/rdmarpc/rdmarpc/contrib/prometheus"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// BenchmarkEcho is a 64 B unary call over the in-memory transport, without
// stats handlers and with this package's metrics on both ends: what the
// metrics cost a call.
func BenchmarkEcho(b *testing.B) {
	for _, tc := range []struct {
		name    string
		metrics bool
	}{{"handlers=none", false}, {"handlers=prometheus", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var sopts []rpc.ServerOption
			var copts []rpc.DialOption
			if tc.metrics {
				sm, cm := rpcprom.NewServerMetrics(rpcprom.Options{}), rpcprom.NewClientMetrics(rpcprom.Options{})
				prom.NewRegistry().MustRegister(sm, cm)
				sopts = append(sopts, rpc.StatsHandler(sm))
				copts = append(copts, rpc.WithStatsHandler(cm))
			}
			tr := pipe.New(pipe.Options{})
			srv := rpc.NewServer(sopts...)
			testpb.RegisterTestServer(srv, echo{})
			lis, err := tr.Listen("bench:0")
			if err != nil {
				b.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(lis) }()
			defer func() { srv.Stop(); <-served }()
			ctx := context.Background()
			cc, err := rpc.Dial(ctx, "pipe://"+lis.Addr().String(), append(copts, rpc.WithTransport(tr))...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			c := testpb.NewTestClient(cc)
			req := &testpb.EchoRequest{Payload: make([]byte, 64)}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Echo(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
