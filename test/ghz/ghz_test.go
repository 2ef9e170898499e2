package ghz

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// startServer builds test/peers' rdmarpcserver (the interop TestService
// on a tcp:// port) in its own module and starts it; it stops with the
// test.
func startServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rdmarpcserver")
	build := exec.Command("go", "build", "-o", bin, "./internal/rdmarpcserver")
	build.Dir = "../peers"
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rdmarpcserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var addr string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
		if a, ok := strings.CutPrefix(sc.Text(), "tcp="); ok {
			addr = a
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.Copy(io.Discard, stdout) }()
	t.Cleanup(func() {
		stdin.Close()
		<-done
		if err := cmd.Wait(); err != nil {
			t.Errorf("rdmarpcserver: %v", err)
		}
	})
	if addr == "" {
		t.Fatalf("rdmarpcserver said no address: %v", sc.Err())
	}
	return addr
}

// ghz loads an rdmarpc server's unary call (the interop TestService's
// UnaryCall, an echo of a payload of the size asked) over its tcp:// port:
// every one of its calls answers OK.
func TestGHZLoadsRdmarpc(t *testing.T) {
	addr := startServer(t)
	const n = 2000
	cmd := exec.Command("go", "tool", "ghz", "--insecure",
		"--import-paths", "../../interop/grpc_testing/proto", "--proto", "grpc/testing/test.proto",
		"--call", "grpc.testing.TestService/UnaryCall",
		"-d", `{"response_size":64,"payload":{"body":"aGVsbG8gcmRtYXJwYw=="}}`,
		"-n", "2000", "-c", "8", "--format", "json", addr)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ghz: %v\n%s", err, out)
	}
	var r struct {
		Count        int            `json:"count"`
		Rps          float64        `json:"rps"`
		StatusCodes  map[string]int `json:"statusCodeDistribution"`
		Errors       map[string]int `json:"errorDistribution"`
		LatencyDistr []struct {
			Percentage int   `json:"percentage"`
			Latency    int64 `json:"latency"`
		} `json:"latencyDistribution"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("ghz's report: %v\n%s", err, out)
	}
	if r.Count != n || r.StatusCodes["OK"] != n || len(r.Errors) != 0 {
		t.Fatalf("ghz: %d calls, status codes %v, errors %v; want %d OK", r.Count, r.StatusCodes, r.Errors, n)
	}
	t.Logf("ghz: %d calls OK, %.0f calls/s", r.Count, r.Rps)
}
