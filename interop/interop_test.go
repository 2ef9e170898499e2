package interop

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/rdma"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds each case: reaching it means the case hung, never that
// the machine was slow (a case's work is a few hundred KiB).
const hangGuard = 60 * time.Second

// serve starts a server with srv for TestService on tr at addr and returns
// a client connected to it; both end with the test. A srv that also
// implements UnimplementedService serves that too.
func serve(t *testing.T, tr transport.Transport, addr string, srv grpc_testing.TestServiceServer, opts ...rpc.ServerOption) *rpc.ClientConn {
	t.Helper()
	lis, err := tr.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(opts...)
	grpc_testing.RegisterTestServiceServer(s, srv)
	if u, ok := srv.(grpc_testing.UnimplementedServiceServer); ok {
		grpc_testing.RegisterUnimplementedServiceServer(s, u)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cc, err := rpc.Dial(ctx, lis.Addr().Network()+"://"+lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// runCases runs every case, each as a subtest, on one connection.
func runCases(t *testing.T, cc rpc.ClientConnInterface) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			if err := Cases[name](ctx, cc); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestPipe(t *testing.T) {
	runCases(t, serve(t, pipe.New(pipe.Options{}), "interop", NewTestServer(ServerOptions{})))
	t.Run("queued_streams", func(t *testing.T) { queuedStreams(t, pipe.New(pipe.Options{}), "interop-refused") })
}

func TestTCP(t *testing.T) {
	runCases(t, serve(t, tcp.New(tcp.Options{}), "127.0.0.1:0", NewTestServer(ServerOptions{})))
	t.Run("queued_streams", func(t *testing.T) { queuedStreams(t, tcp.New(tcp.Options{}), "127.0.0.1:0") })
}

// queuedStreams: with the server's one stream slot taken, the stubs of a
// server-streaming and of a client-streaming call wait in NewStream (the
// server's SETTINGS said 1), sending nothing; once the slot frees they run
// as if nothing happened.
func queuedStreams(t *testing.T, tr transport.Transport, addr string) {
	cc := serve(t, tr, addr, NewTestServer(ServerOptions{}), rpc.MaxConcurrentStreams(1))
	tc := grpc_testing.NewTestServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()

	hold, err := tc.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &grpc_testing.StreamingOutputCallRequest{ResponseParameters: []*grpc_testing.ResponseParameters{{Size: 1}}}
	if err := hold.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Recv(); err != nil { // its handler runs: the slot is taken
		t.Fatal(err)
	}
	outDone := make(chan error, 1)
	go func() {
		outDone <- func() error {
			out, err := tc.StreamingOutputCall(ctx, &grpc_testing.StreamingOutputCallRequest{
				ResponseParameters: []*grpc_testing.ResponseParameters{{Size: 31415}, {Size: 9}},
			})
			if err != nil {
				return err
			}
			for _, n := range []int{31415, 9} {
				r, err := out.Recv()
				if err != nil {
					return err
				}
				if len(r.GetPayload().GetBody()) != n {
					return fmt.Errorf("%d bytes, want %d", len(r.GetPayload().GetBody()), n)
				}
			}
			if _, err := out.Recv(); err != io.EOF {
				return fmt.Errorf("end: %v, want io.EOF", err)
			}
			return nil
		}()
	}()
	inDone := make(chan error, 1)
	go func() {
		inDone <- func() error {
			in, err := tc.StreamingInputCall(ctx)
			if err != nil {
				return err
			}
			for _, n := range []int{100, 200} {
				if err := in.Send(&grpc_testing.StreamingInputCallRequest{Payload: zeros(n)}); err != nil {
					return err
				}
			}
			r, err := in.CloseAndRecv()
			if err == nil && r.GetAggregatedPayloadSize() != 300 {
				err = fmt.Errorf("aggregated_payload_size %d, want 300", r.GetAggregatedPayloadSize())
			}
			return err
		}()
	}()
	select {
	case err := <-outDone:
		t.Fatalf("a server stream ended while the one slot was taken: %v", err)
	case err := <-inDone:
		t.Fatalf("a client stream ended while the one slot was taken: %v", err)
	case <-time.After(20 * time.Millisecond): // a look, not a verdict: they may not have started yet
	}
	if err := hold.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Recv(); err != io.EOF {
		t.Fatalf("the holding stream's end: %v, want io.EOF", err)
	}
	if err := <-outDone; err != nil {
		t.Fatalf("server stream, once the slot freed: %v", err)
	}
	if err := <-inDone; err != nil {
		t.Fatalf("client stream, once the slot freed: %v", err)
	}
}

// TestRDMA runs the cases over rdma:// on the device the Soft-RoCE test bed
// sets up (testbed/README.md); elsewhere it skips.
func TestRDMA(t *testing.T) {
	if os.Getenv("RDMARPC_TEST_DEV") == "" {
		t.Skip("no RDMA device here (RDMARPC_TEST_DEV unset): this test runs in the Soft-RoCE guest, see testbed/README.md")
	}
	ip := os.Getenv("RDMARPC_TEST_IP")
	if net.ParseIP(ip) == nil {
		t.Fatalf("RDMARPC_TEST_IP=%q is not an IP", ip)
	}
	runCases(t, serve(t, rdma.New(rdma.Options{}), net.JoinHostPort(ip, "0"), NewTestServer(ServerOptions{})))
	t.Run("queued_streams", func(t *testing.T) { queuedStreams(t, rdma.New(rdma.Options{}), net.JoinHostPort(ip, "0")) })
}

func TestCaseNames(t *testing.T) {
	if len(Names) != len(Cases) {
		t.Fatalf("Names lists %d cases, Cases has %d", len(Names), len(Cases))
	}
	for _, n := range Names {
		if Cases[n] == nil {
			t.Errorf("Names lists %q, which Cases lacks", n)
		}
	}
}
