package server

import (
	"context"
	"testing"

	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// TestHealthFollowsShutdown: the KV service is SERVING while the server
// runs, and a watcher sees NOT_SERVING as soon as the shutdown starts,
// while calls still drain.
func TestHealthFollowsShutdown(t *testing.T) {
	r := start(t, Config{Listen: []string{"tcp://127.0.0.1:0"}})
	cc, err := rpc.Dial(testCtx(t), r.srv.Targets()[0], rpc.WithTransport(tcp.New(tcp.Options{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "rdmarpc.kvstore.v1.KV"})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := w.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch: %v, %v; want SERVING", resp, err)
	}
	r.cancel() // the shutdown starts; the watch keeps it draining
	if resp, err := w.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch after the shutdown began: %v, %v; want NOT_SERVING", resp, err)
	}
	cancel() // the last stream ends, and the drain with it
	if err := r.wait(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
