package peers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/rpc"
)

const serverEnv = "PEERS_GRPCGO_SERVER"

// TestGRPCGoServerProcess is gRPC-go's interop server in a process of its
// own, for the benchmarks: it prints its address and serves until stdin
// closes. It does nothing in an ordinary run.
func TestGRPCGoServerProcess(t *testing.T) {
	if os.Getenv(serverEnv) == "" {
		t.Skip("the benchmarks' server process")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, interop.NewTestServer())
	fmt.Println(lis.Addr().String())
	go func() { bufio.NewReader(os.Stdin).ReadString('\n'); s.Stop() }()
	s.Serve(lis)
}

// serverProcess starts gRPC-go's server in another process and returns
// its address.
func serverProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGRPCGoServerProcess$")
	cmd.Env = append(os.Environ(), serverEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	return addr[:len(addr)-1]
}

// BenchmarkUnary64B: a 64-byte unary call at concurrency 1 against
// gRPC-go's server in another process, from rdmarpc's client (grpc://)
// and from gRPC-go's.
func BenchmarkUnary64B(b *testing.B) {
	addr := serverProcess(b)
	req := &testpb.SimpleRequest{ResponseSize: 64, Payload: &testpb.Payload{Body: make([]byte, 64)}}
	run := func(b *testing.B, tc testpb.TestServiceClient) {
		ctx := context.Background()
		if _, err := tc.UnaryCall(ctx, req); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := tc.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("rdmarpc", func(b *testing.B) {
		cc, err := rpc.NewClient("grpc://"+addr, rpc.WithInsecure())
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		run(b, testpb.NewTestServiceClient(grpcgo.NewClient(cc)))
	})
	b.Run("grpcgo", func(b *testing.B) {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		run(b, testpb.NewTestServiceClient(cc))
	})
}
