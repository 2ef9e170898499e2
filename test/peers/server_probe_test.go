package peers

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGRPCHealthProbe: grpc-health-probe (the tool Kubernetes users run
// as an exec probe, built from the Go module proxy as this module's tool)
// reports an rdmarpc server SERVING on its tcp:// port, and fails for a
// service the server does not know.
func TestGRPCHealthProbe(t *testing.T) {
	probe := filepath.Join(t.TempDir(), "grpc-health-probe")
	if out, err := exec.Command("go", "build", "-o", probe, "github.com/grpc-ecosystem/grpc-health-probe").CombinedOutput(); err != nil {
		t.Fatalf("building grpc-health-probe: %v\n%s", err, out)
	}
	s := startServer(t, false)
	out, err := exec.Command(probe, "-addr="+s.tcp, "-connect-timeout=30s", "-rpc-timeout=30s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SERVING") {
		t.Fatalf("grpc-health-probe -addr=%s: %v\n%s", s.tcp, err, out)
	}
	out, err = exec.Command(probe, "-addr="+s.tcp, "-service=no.such.Service", "-connect-timeout=30s", "-rpc-timeout=30s").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(string(out), "NotFound") {
		t.Fatalf("grpc-health-probe for an unknown service: %v\n%s\nwant exit status 3 (the RPC failed) with NotFound", err, out)
	}
}
