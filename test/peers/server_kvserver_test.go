package peers

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	ghealth "google.golang.org/grpc/health/grpc_health_v1"
	greflection "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// rawCodec passes messages through as the bytes they are: the kvstore's
// messages are encoded here by hand (its generated package lives in the
// examples module, whose dependencies this module does not take).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
func bytesField(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

var _ encoding.Codec = rawCodec{}

// field returns the bytes of field num of message b ("" when absent).
func field(t *testing.T, b []byte, num protowire.Number) string {
	t.Helper()
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			t.Fatalf("malformed message %x", b)
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(n, typ, b)
		if k < 0 {
			t.Fatalf("malformed message %x", b)
		}
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return string(v)
		}
		b = b[k:]
	}
	return ""
}

// startKVServer builds the kvstore example's kvserver and starts it as
// `make demo` does (examples/kvstore/quickstart.sh: its defaults, one
// auto:// listener, which on a host without RDMA is TCP), on a free port;
// it returns the host:port of that one listener.
func startKVServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "kvserver")
	build := exec.Command("go", "build", "-o", bin, "./kvstore/cmd/kvserver")
	build.Dir = "../../examples"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kvserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "auto://127.0.0.1:0", "--log-format", "json")
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	ready := make(chan []string, 1)
	var logs strings.Builder
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var e struct {
				Msg     string   `json:"msg"`
				Targets []string `json:"targets"`
			}
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "kvserver ready" {
				ready <- e.Targets
			} else if logs.Len() < 64<<10 {
				logs.Write(append(sc.Bytes(), '\n'))
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-exited
		_ = cmd.Wait()
	})
	select {
	case targets := <-ready:
		if len(targets) != 1 {
			t.Fatalf("kvserver listens on %q, want one target", targets)
		}
		_, addr, ok := strings.Cut(targets[0], "://")
		if !ok || strings.HasSuffix(addr, ":0") {
			t.Fatalf("kvserver's target %q names no port", targets[0])
		}
		return addr
	case <-exited:
		t.Fatalf("kvserver exited before it was ready:\n%s", logs.String())
	}
	return ""
}

// gRPC-go's client against kvserver started with `make demo`'s defaults,
// on its one port: health, reflection, unary calls and a server stream
// (Watch) of the kvstore's own service.
func TestServerKVServerDemo(t *testing.T) {
	addr := startKVServer(t)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	t.Run("health", func(t *testing.T) {
		r, err := ghealth.NewHealthClient(cc).Check(ctx, &ghealth.HealthCheckRequest{})
		if err != nil || r.GetStatus() != ghealth.HealthCheckResponse_SERVING {
			t.Fatalf("Check: %v, %v", r.GetStatus(), err)
		}
	})
	t.Run("reflection", func(t *testing.T) {
		st, err := greflection.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&greflection.ServerReflectionRequest{MessageRequest: &greflection.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range r.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		if !strings.Contains(strings.Join(names, " "), "rdmarpc.kvstore.v1.KV") {
			t.Fatalf("services %q, want the kvstore's", names)
		}
		st.CloseSend()
	})
	call := func(method string, req []byte) []byte {
		t.Helper()
		var resp []byte
		if err := cc.Invoke(ctx, "/rdmarpc.kvstore.v1.KV/"+method, &req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		return resp
	}
	t.Run("unary", func(t *testing.T) {
		call("Put", bytesField(bytesField(nil, 1, "peers/a"), 2, "1"))
		if v := field(t, call("Get", bytesField(nil, 1, "peers/a")), 2); v != "1" {
			t.Fatalf("Get: %q, want %q", v, "1")
		}
	})
	t.Run("watch", func(t *testing.T) {
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		st, err := cc.NewStream(wctx, &grpc.StreamDesc{ServerStreams: true}, "/rdmarpc.kvstore.v1.KV/Watch", grpc.ForceCodec(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		req := bytesField(nil, 1, "peers/w")
		if err := st.SendMsg(&req); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var first []byte // the progress report: the watch is in place
		if err := st.RecvMsg(&first); err != nil {
			t.Fatal(err)
		}
		call("Put", bytesField(bytesField(nil, 1, "peers/w/x"), 2, "2"))
		for {
			var m []byte
			if err := st.RecvMsg(&m); err != nil {
				t.Fatalf("Watch: %v", err)
			}
			if strings.Contains(string(m), "peers/w/x") {
				break
			}
		}
	})
}
