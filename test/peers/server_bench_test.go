package peers

import (
	"context"
	"slices"
	"testing"
	"time"

	gtesting "google.golang.org/grpc/interop/grpc_testing"
)

// BenchmarkServerUnary is gRPC-go's client calling UnaryCall with 64-byte
// request and response payloads, one call at a time, against rdmarpc's
// server (the gRPC protocol on its tcp:// port) and against gRPC-go's own
// interop server, each in a process of its own. It reports p50 and p99
// latency besides ns/op.
//
//	go test -run XXX -bench BenchmarkServerUnary -benchtime 20000x .
func BenchmarkServerUnary(b *testing.B) {
	for _, name := range []string{"rdmarpcserver", "grpcgoserver"} {
		b.Run(name, func(b *testing.B) {
			var s *server
			if name == "rdmarpcserver" {
				s = startServer(b, false)
			} else {
				s = startCmd(b, name, nil, false)
			}
			cc := dialB(b, s.tcp)
			tc := gtesting.NewTestServiceClient(cc)
			ctx := context.Background()
			req := &gtesting.SimpleRequest{ResponseSize: 64, Payload: &gtesting.Payload{Body: make([]byte, 64)}}
			for range 1000 { // warm up: connection, pools
				if _, err := tc.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, err := tc.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
