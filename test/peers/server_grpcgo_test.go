package peers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	gcodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	ghealth "google.golang.org/grpc/health/grpc_health_v1"
	ginterop "google.golang.org/grpc/interop"
	gtesting "google.golang.org/grpc/interop/grpc_testing"
	gmetadata "google.golang.org/grpc/metadata"
	greflection "google.golang.org/grpc/reflection/grpc_reflection_v1"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if serverBin.dir != "" {
		os.RemoveAll(serverBin.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// hangGuard bounds a test that would otherwise hang: progress, not speed.
const hangGuard = 60 * time.Second

// serverBin is the directory the internal commands are built in, once
// each: the servers run in processes of their own (see
// internal/rdmarpcserver why).
var serverBin struct {
	once sync.Once
	dir  string
	err  error
	mu   sync.Mutex
	path map[string]string // command → its binary
}

// build builds ./internal/cmd once and returns its binary.
func build(t testing.TB, cmd string) string {
	t.Helper()
	serverBin.once.Do(func() {
		serverBin.dir, serverBin.err = os.MkdirTemp("", "peers")
		serverBin.path = map[string]string{}
	})
	if serverBin.err != nil {
		t.Fatal(serverBin.err)
	}
	serverBin.mu.Lock()
	defer serverBin.mu.Unlock()
	if p, ok := serverBin.path[cmd]; ok {
		return p
	}
	p := filepath.Join(serverBin.dir, cmd)
	args := append([]string{"build", "-o", p}, serverBuildFlags...)
	out, err := exec.Command("go", append(args, "./internal/"+cmd)...).CombinedOutput()
	if err != nil {
		t.Fatalf("building %s: %v\n%s", cmd, err, out)
	}
	serverBin.path[cmd] = p
	return p
}

// serverBuildFlags are go build's flags for the server (race_test.go).
var serverBuildFlags []string

// server is a running rdmarpcserver.
type server struct {
	tcp, unix string // gRPC-go targets
	stdin     io.WriteCloser
	cmd       *exec.Cmd
	done      chan struct{} // its stdout drained
}

// startServer starts an rdmarpcserver (with -graceful when graceful) and
// returns its gRPC-go targets; it stops with the test.
func startServer(t testing.TB, graceful bool, extra ...string) *server {
	t.Helper()
	return startCmd(t, "rdmarpcserver", append([]string{"-unix", filepath.Join(t.TempDir(), "s.sock")}, extra...), graceful)
}

// startCmd starts ./internal/cmd with args and reads its addresses.
func startCmd(t testing.TB, name string, args []string, graceful bool) *server {
	t.Helper()
	bin := build(t, name)
	if graceful {
		args = append(args, "-graceful")
	}
	cmd := exec.Command(bin, args...)
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
	s := &server{stdin: stdin, cmd: cmd, done: make(chan struct{})}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			break
		}
		if addr, ok := strings.CutPrefix(line, "tcp="); ok {
			s.tcp = addr
		}
		if addr, ok := strings.CutPrefix(line, "unix="); ok {
			s.unix = "unix://" + addr
		}
	}
	go func() {
		defer close(s.done)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() { s.stop(t) })
	if s.tcp == "" {
		t.Fatalf("the server said no addresses: %v", sc.Err())
	}
	return s
}

// stop ends the server (its stdin) and waits for it; it must exit cleanly.
func (s *server) stop(t testing.TB) {
	if s.cmd == nil {
		return
	}
	s.stdin.Close()
	<-s.done
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("rdmarpcserver: %v", err)
	}
	s.cmd = nil
}

func target(s *server, network string) string {
	if network == "unix" {
		return s.unix
	}
	return s.tcp
}

func dialB(t testing.TB, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func dial(t *testing.T, target string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestServerGRPCGoInterop(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			cc := dial(t, target(startServer(t, false), network))
			tc := gtesting.NewTestServiceClient(cc)
			for _, c := range []struct {
				name string
				run  func(ctx context.Context)
			}{
				{"empty_unary", func(ctx context.Context) { ginterop.DoEmptyUnaryCall(ctx, tc) }},
				{"large_unary", func(ctx context.Context) { ginterop.DoLargeUnaryCall(ctx, tc) }},
				{"client_streaming", func(ctx context.Context) { ginterop.DoClientStreaming(ctx, tc) }},
				{"server_streaming", func(ctx context.Context) { ginterop.DoServerStreaming(ctx, tc) }},
				{"ping_pong", func(ctx context.Context) { ginterop.DoPingPong(ctx, tc) }},
				{"empty_stream", func(ctx context.Context) { ginterop.DoEmptyStream(ctx, tc) }},
				{"timeout_on_sleeping_server", func(ctx context.Context) { ginterop.DoTimeoutOnSleepingServer(ctx, tc) }},
				{"cancel_after_begin", func(ctx context.Context) { ginterop.DoCancelAfterBegin(ctx, tc) }},
				{"cancel_after_first_response", func(ctx context.Context) { ginterop.DoCancelAfterFirstResponse(ctx, tc) }},
				{"custom_metadata", func(ctx context.Context) { ginterop.DoCustomMetadata(ctx, tc) }},
				{"status_code_and_message", func(ctx context.Context) { ginterop.DoStatusCodeAndMessage(ctx, tc) }},
				{"special_status_message", func(ctx context.Context) { ginterop.DoSpecialStatusMessage(ctx, tc) }},
				{"unimplemented_method", func(ctx context.Context) { ginterop.DoUnimplementedMethod(ctx, cc) }},
				{"unimplemented_service", func(ctx context.Context) {
					ginterop.DoUnimplementedService(ctx, gtesting.NewUnimplementedServiceClient(cc))
				}},
			} {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
					defer cancel()
					c.run(ctx)
				})
			}
		})
	}
}

// TestServerGRPCGoStatusDetails: a status with a detail, a percent-encoded
// message, binary and text metadata both ways, headers and trailers.
func TestServerGRPCGoStatusDetails(t *testing.T) {
	cc := dial(t, startServer(t, false).tcp)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	ctx = gmetadata.AppendToOutgoingContext(ctx, "x-sent", "v1", "x-sent-bin", string([]byte{0, 1, 0xff}))
	var header, trailer gmetadata.MD
	err := cc.Invoke(ctx, "/peers.Details/Fail", &emptypb.Empty{}, &emptypb.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer))
	st := gstatus.Convert(err)
	if st.Code() != gcodes.FailedPrecondition || st.Message() != "not now: 100% busy\n" {
		t.Fatalf("got %v %q, want FailedPrecondition %q", st.Code(), st.Message(), "not now: 100% busy\n")
	}
	ds := st.Details()
	if len(ds) != 1 {
		t.Fatalf("details %v, want one", ds)
	}
	if s, ok := ds[0].(*wrapperspb.StringValue); !ok || s.GetValue() != "retry later" {
		t.Fatalf("detail %v", ds[0])
	}
	if got := header.Get("x-got"); len(got) != 1 || got[0] != "v1" {
		t.Errorf("header x-got %q", got)
	}
	if got := header.Get("x-got-bin"); len(got) != 1 || got[0] != string([]byte{0, 1, 0xff}) {
		t.Errorf("header x-got-bin %q", got)
	}
	if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "t" {
		t.Errorf("trailer x-trailer %q", got)
	}
}

// TestServerGRPCGoHealth: gRPC-go's health client sees SERVING.
func TestServerGRPCGoHealth(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			cc := dial(t, target(startServer(t, false), network))
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			r, err := ghealth.NewHealthClient(cc).Check(ctx, &ghealth.HealthCheckRequest{})
			if err != nil || r.GetStatus() != ghealth.HealthCheckResponse_SERVING {
				t.Fatalf("Check: %v, %v", r, err)
			}
		})
	}
}

// TestServerGRPCGoReflection: gRPC-go's reflection stub lists the
// services.
func TestServerGRPCGoReflection(t *testing.T) {
	cc := dial(t, startServer(t, false).tcp)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	stream, err := greflection.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&greflection.ServerReflectionRequest{MessageRequest: &greflection.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	all := strings.Join(names, " ")
	for _, want := range []string{"grpc.testing.TestService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !strings.Contains(all, want) {
			t.Errorf("services %v lack %s", names, want)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
}

// TestServerOnePortBothProtocols: the port that serves gRPC-go's client
// serves rdmarpc's own client too, on the same listener.
func TestServerOnePortBothProtocols(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			s := startServer(t, false)
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			rtarget := "tcp://" + s.tcp
			if network == "unix" {
				rtarget = s.unix
			}
			rc, err := rpc.NewClient(rtarget)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := rc.Invoke(ctx, "/grpc.testing.TestService/EmptyCall", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
				t.Fatalf("rdmarpc client: %v", err)
			}
			ginterop.DoEmptyUnaryCall(ctx, gtesting.NewTestServiceClient(dial(t, target(s, network))))
			if err := rc.Invoke(ctx, "/grpc.testing.TestService/EmptyCall", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
				t.Fatalf("rdmarpc client after gRPC-go's: %v", err)
			}
		})
	}
}
