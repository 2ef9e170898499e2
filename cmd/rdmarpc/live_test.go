package main

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/internal/loadgen"
)

// TestLiveCallAndBenchRDMA runs call and bench over rdma://$RDMARPC_TEST_IP
// in the Soft-RoCE guest of testbed/ (the "-run=Live" line of
// testbed/tests.txt); elsewhere it skips.
func TestLiveCallAndBenchRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if os.Getenv("RDMARPC_TEST_DEV") == "" || ip == "" {
		t.Skip("RDMARPC_TEST_DEV or RDMARPC_TEST_IP not set: this test needs a real RDMA device (it runs in the Soft-RoCE guest of testbed/)")
	}
	target := startProbeOn(t, "rdma://"+net.JoinHostPort(ip, "0"))
	out, stderr, err := runCmd(t, newCallCmd(), "", args(probeFlags, "-d", `{"text": "over rdma"}`, "-H", "x-probe: 1", target, "probe.v1.Probe/Echo")...)
	if err != nil || out != `{"text":"over rdma","metadata":["x-probe=1"]}`+"\n" {
		t.Fatalf("call over %s: %q, %v; stderr %s", target, out, err, stderr)
	}
	out, stderr, err = runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "500", "-c", "4", "--connections", "2", "--json", target, "probe.v1.Probe/Echo")...)
	if err != nil {
		t.Fatalf("bench over %s: %v; stderr %s", target, err, stderr)
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Calls != 500 || s.Codes["OK"] != 500 {
		t.Fatalf("bench over rdma: %+v; want 500 OK calls", s)
	}
	// The rdma transport counts what it does; server and client share it
	// here, so the counts are both ends'.
	if len(s.Counters) == 0 {
		t.Fatal("bench over rdma printed no transport counters")
	}
	t.Logf("transport counters per call: %v", s.Counters)
	out, _, err = runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "200", target, "probe.v1.Probe/Echo")...)
	if err != nil || !strings.Contains(out, "Transport counters per call") {
		t.Fatalf("text: %v\n%s", err, out)
	}
	t.Logf("rdmarpc bench over %s:\n%s", target, out)
}

// TestLiveReflectionRDMA: list, describe and call with the schema from the
// server's reflection service over rdma://$RDMARPC_TEST_IP, in the
// Soft-RoCE guest of testbed/ (the "-run=Live" line); elsewhere it skips.
func TestLiveReflectionRDMA(t *testing.T) {
	ip := os.Getenv("RDMARPC_TEST_IP")
	if os.Getenv("RDMARPC_TEST_DEV") == "" || ip == "" {
		t.Skip("RDMARPC_TEST_DEV or RDMARPC_TEST_IP not set: this test needs a real RDMA device (it runs in the Soft-RoCE guest of testbed/)")
	}
	target := serveProbe(t, "rdma://"+net.JoinHostPort(ip, "0"), true)
	out, stderr, err := runCmd(t, newListCmd(), "", target)
	if want := "grpc.reflection.v1.ServerReflection\nprobe.v1.Probe\n"; err != nil || out != want {
		t.Fatalf("list %s: %q, %v (stderr %s); want %q", target, out, err, stderr, want)
	}
	out, _, err = runCmd(t, newDescribeCmd(), "", target, "probe.v1.EchoRequest")
	if err != nil || !strings.Contains(out, "message EchoRequest {\n") {
		t.Fatalf("describe over %s: %v\n%s", target, err, out)
	}
	out, stderr, err = runCmd(t, newCallCmd(), "", "-d", `{"text": "reflected over rdma"}`, target, "probe.v1.Probe/Echo")
	if err != nil || out != `{"text":"reflected over rdma"}`+"\n" {
		t.Fatalf("call over %s: %q, %v; stderr %s", target, out, err, stderr)
	}
}
