package peers

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTool is the go command: on the PATH, else Go's usual place.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// TestClientInteropCommand runs the project's interop-client, a process
// of its own, with --transport grpc against gRPC-go's interop server:
// every case it has must pass.
func TestClientInteropCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds interop-client")
	}
	bin := filepath.Join(t.TempDir(), "interop-client")
	build := exec.Command(goTool(), "build", "-o", bin, "github.com/rdmarpc/rdmarpc/interop/cmd/interop-client")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building interop-client: %v\n%s", err, out)
	}
	addr, _ := grpcgoServer(t)
	host, port, _ := strings.Cut(addr, ":")
	var out bytes.Buffer
	cmd := exec.Command(bin, "--transport", "grpc", "--server_host", host, "--server_port", port, "--test_case", "all")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("interop-client --transport grpc against gRPC-go's interop server:\n%s", out.String())
	if err != nil {
		t.Fatalf("interop-client: %v", err)
	}
	if strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "PASS") {
		t.Fatal("not every case passed")
	}
}
