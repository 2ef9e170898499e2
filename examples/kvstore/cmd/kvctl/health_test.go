package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// TestHealth: kvctl health exits 0 only when the service is SERVING, which
// is what a Kubernetes exec readiness probe relies on.
func TestHealth(t *testing.T) {
	target := startServer(t)
	for _, args := range [][]string{{"health"}, {"health", "--service", ""}} {
		if r := kvctl(t, target, "", args...); r.code != 0 || r.stdout != "SERVING\n" {
			t.Fatalf("kvctl %q against a serving kvserver: %+v, want exit 0 and SERVING", args, r)
		}
	}
	r := kvctl(t, target, "", "--json", "health")
	var out map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 || out["status"] != "SERVING" || out["service"] != "rdmarpc.kvstore.v1.KV" {
		t.Fatalf("--json health: %+v (%v)", r, err)
	}
	if r := kvctl(t, target, "", "health", "--service", "no.such.Service"); r.code != 1 || !strings.Contains(r.stderr, "NotFound") {
		t.Fatalf("unknown service: %+v, want exit 1 and NotFound", r)
	}

	// A server whose health says NOT_SERVING (as kvserver's does while it
	// drains): exit 1.
	srv := rpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("rdmarpc.kvstore.v1.KV", healthpb.HealthCheckResponse_NOT_SERVING)
	lis, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()
	if r := kvctl(t, "tcp://"+lis.Addr().String(), "", "health"); r.code != 1 || r.stdout != "NOT_SERVING\n" {
		t.Fatalf("NOT_SERVING server: %+v, want exit 1 and NOT_SERVING", r)
	}
}
