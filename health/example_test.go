package health_test

import (
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// A server written for gRPC-go's health package, with the imports changed.
func Example() {
	s := rpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	hs.SetServingStatus("rdmarpc.kvstore.v1.KV", healthpb.HealthCheckResponse_SERVING)
	// ... s.Serve(lis) ...

	// Before a graceful stop: every service NOT_SERVING, so that health
	// checkers move away while calls drain.
	hs.Shutdown()
	s.GracefulStop()
}
