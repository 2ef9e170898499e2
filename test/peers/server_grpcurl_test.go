package peers

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGRPCurl: grpcurl (built from the Go module proxy as this module's
// tool) lists an rdmarpc server's services through reflection, describes
// one, calls a unary and a server-streaming method on its tcp:// port, and
// reads its channelz.
func TestGRPCurl(t *testing.T) {
	grpcurl := filepath.Join(t.TempDir(), "grpcurl")
	if out, err := exec.Command("go", "build", "-o", grpcurl, "github.com/fullstorydev/grpcurl/cmd/grpcurl").CombinedOutput(); err != nil {
		t.Fatalf("building grpcurl: %v\n%s", err, out)
	}
	s := startServer(t, false)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(grpcurl, append([]string{"-plaintext", "-max-time=60"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := run(s.tcp, "list")
	for _, svc := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.testing.TestService", "grpc.channelz.v1.Channelz"} {
		if !strings.Contains(list, svc+"\n") {
			t.Errorf("grpcurl list: %q lacks %s", list, svc)
		}
	}
	if d := run(s.tcp, "describe", "grpc.testing.TestService"); !strings.Contains(d, "rpc FullDuplexCall ( stream .grpc.testing.StreamingOutputCallRequest ) returns ( stream .grpc.testing.StreamingOutputCallResponse );") {
		t.Errorf("grpcurl describe: %s", d)
	}
	if u := run("-d", `{"response_size": 3}`, s.tcp, "grpc.testing.TestService/UnaryCall"); !strings.Contains(u, `"body": "AAAA"`) {
		t.Errorf("grpcurl unary call: %s, want a 3-byte body (AAAA)", u)
	}
	if cz := run(s.tcp, "grpc.channelz.v1.Channelz/GetServers"); !strings.Contains(cz, `"callsStarted"`) || !strings.Contains(cz, `"listenSocket"`) {
		t.Errorf("grpcurl channelz GetServers: %s, want a server's calls and listeners", cz)
	}
	st := run("-d", `{"response_parameters":[{"size":2},{"size":1}]}`, s.tcp, "grpc.testing.TestService/StreamingOutputCall")
	if !strings.Contains(st, `"body": "AAA="`) || !strings.Contains(st, `"body": "AA=="`) || strings.Count(st, `"payload"`) != 2 {
		t.Errorf("grpcurl server-streaming call: %s, want two responses of 2 and 1 bytes", st)
	}
}
