package bufconn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/test/bufconn"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp" // Serve(net.Listener) and WithContextDialer frame with it
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type echo struct{ testpb.UnimplementedTestServer }

func (echo) Echo(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

// serve serves the Test service's Echo on lis until the test ends.
func serve(t *testing.T, lis net.Listener) {
	t.Helper()
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, echo{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func call(t *testing.T, target string, opts ...rpc.DialOption) {
	t.Helper()
	cc, err := rpc.Dial(testCtx(t), target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// Larger than the listener's buffer, so writes wait for the reader.
	payload := bytes.Repeat([]byte("x"), 256<<10)
	resp, err := testpb.NewTestClient(cc).Echo(testCtx(t), &testpb.EchoRequest{Payload: payload})
	if err != nil || !bytes.Equal(resp.Payload, payload) {
		t.Fatalf("Echo over %s: %v", target, err)
	}
}

// The gRPC-go bufconn pattern: Serve the in-memory listener, dial it with
// WithContextDialer.
func TestServeAndDial(t *testing.T) {
	lis := bufconn.Listen(64 << 10)
	serve(t, lis)
	call(t, "passthrough:///bufnet", rpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}))
}

// Serve takes any net.Listener: here a unix socket.
func TestServeUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, lis)
	call(t, "unix-test", rpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}))
}

// The connections behave as net.Conns: bounded buffering, EOF after the
// peer's close, deadlines that expire and can be lifted, and a closed
// listener refusing both ends.
func TestConn(t *testing.T) {
	lis := bufconn.Listen(4)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := lis.DialContext(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	// A write larger than the buffer completes as the peer reads.
	wrote := make(chan error, 1)
	go func() { _, err := client.Write([]byte("hello, world")); wrote <- err }()
	got := make([]byte, 12)
	if _, err := io.ReadFull(server, got); err != nil || string(got) != "hello, world" {
		t.Fatalf("read %q, %v", got, err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	// A read deadline in the past fails at once; lifting it reads again.
	server.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := server.Read(got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	server.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	if n, err := server.Read(got); err != nil || string(got[:n]) != "!" {
		t.Fatalf("read after lifting the deadline: %q, %v", got[:n], err)
	}
	// The buffer is full and nobody reads: a write deadline ends the wait.
	client.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := client.Write(make([]byte, 5)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write into a full buffer past the deadline: %v", err)
	}
	client.Close()
	if _, err := io.ReadAll(server); err != nil {
		t.Fatalf("reading to the peer's close: %v", err)
	}
	if _, err := server.Write([]byte("x")); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
	server.Close()
	lis.Close()
	if _, err := lis.Accept(); !errors.Is(err, bufconn.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := lis.Dial(); !errors.Is(err, bufconn.ErrClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}
}
