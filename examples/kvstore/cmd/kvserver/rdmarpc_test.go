package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rdmarpcTool builds the rdmarpc command (this module's tool) into a
// temporary directory and returns its path; without a Go toolchain (the
// test bed's guest) the test skips.
func rdmarpcTool(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build the rdmarpc command with")
	}
	bin := filepath.Join(t.TempDir(), "rdmarpc")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/rdmarpc/rdmarpc/cmd/rdmarpc").CombinedOutput(); err != nil {
		t.Fatalf("building rdmarpc: %v\n%s", err, out)
	}
	return bin
}

// TestRdmarpcAgainstKVServer: a live kvserver serves reflection and health,
// so that rdmarpc lists, describes and calls it with no .proto file.
func TestRdmarpcAgainstKVServer(t *testing.T) {
	tool := rdmarpcTool(t)
	p := startServer(t, t.TempDir(), "--data-dir", "data", "--listen", "tcp://127.0.0.1:0")
	target := p.targets[0]
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(tool, args...).Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("rdmarpc %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return string(out)
	}

	list := run("list", target)
	for _, svc := range []string{"rdmarpc.kvstore.v1.KV", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(list, svc+"\n") {
			t.Errorf("rdmarpc list %s lacks %s:\n%s", target, svc, list)
		}
	}
	if methods := run("list", target, "rdmarpc.kvstore.v1.KV"); !strings.Contains(methods, "rdmarpc.kvstore.v1.KV.Get\n") {
		t.Errorf("rdmarpc list of the KV service:\n%s", methods)
	}
	if d := run("describe", target, "rdmarpc.kvstore.v1.GetRequest"); !strings.Contains(d, "message GetRequest {") {
		t.Errorf("rdmarpc describe GetRequest:\n%s", d)
	}
	for _, tc := range []struct{ req, want string }{
		{`{}`, `{"status":"SERVING"}`},
		{`{"service": "rdmarpc.kvstore.v1.KV"}`, `{"status":"SERVING"}`},
	} {
		if got := run("call", "-d", tc.req, target, "grpc.health.v1.Health/Check"); got != tc.want+"\n" {
			t.Errorf("rdmarpc call Health/Check %s = %q, want %q", tc.req, got, tc.want)
		}
	}
	run("call", "-d", `{"key": "aw==", "value": "dg=="}`, target, "rdmarpc.kvstore.v1.KV/Put")
	if got := run("call", "-d", `{"key": "aw=="}`, target, "rdmarpc.kvstore.v1.KV/Get"); !strings.Contains(got, `"value":"dg=="`) {
		t.Errorf("rdmarpc call KV/Get = %q", got)
	}
}
