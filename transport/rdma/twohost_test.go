package rdma

import (
	"bytes"
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

const twoHostPort = "7471"

// quitEcho echoes until asked to stop: a FailRequest is the client's
// signal that it is done.
type quitEcho struct {
	testpb.UnimplementedTestServer
	quit chan struct{}
	once sync.Once
}

func (q *quitEcho) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

func (q *quitEcho) Fail(ctx context.Context, in *testpb.FailRequest) (*testpb.FailResponse, error) {
	q.once.Do(func() { close(q.quit) })
	return &testpb.FailResponse{}, nil
}

// serveUntilQuit serves a quitEcho on lis with opts until the client says
// it is done (or ctx ends: then the test fails), and stops gracefully.
func serveUntilQuit(t *testing.T, ctx context.Context, lis transport.Listener, opts ...rpc.ServerOption) {
	t.Helper()
	q := &quitEcho{quit: make(chan struct{})}
	srv := rpc.NewServer(opts...)
	testpb.RegisterTestServer(srv, q)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case <-q.quit:
		srv.GracefulStop()
	case <-ctx.Done():
		srv.Stop()
		t.Error("the client never said it was done")
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// TestTwoHosts runs in the test bed's two-guest mode: the server guest
// serves Echo over rdma://, the client guest calls it with messages from
// 0 B to 4 MiB and many calls at once, so packets cross a (virtual) wire
// between two kernels. Each side then checks its own device counters.
func TestTwoHosts(t *testing.T) {
	ip := guestIP(t)
	role, peer := os.Getenv("ROLE"), os.Getenv("PEER_IP")
	if role != "server" && role != "client" {
		t.Skip("runs in the test bed's two-guest mode (ROLE=server|client)")
	}
	before := deviceCounters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tr := New(Options{MaxMessageSize: 5 << 20})
	if role == "server" {
		lis, err := tr.Listen(net.JoinHostPort(ip, twoHostPort))
		if err != nil {
			t.Fatal(err)
		}
		serveUntilQuit(t, ctx, lis, rpc.MaxRecvMsgSize(5<<20))
		checkCounters(t, before)
		return
	}

	// The client: the server guest may not listen yet, so dial until it
	// does (bounded by ctx).
	var cc *rpc.ClientConn
	untilServed(t, ctx, "dial", func() (err error) {
		cc, err = rpc.Dial(ctx, "rdma://"+net.JoinHostPort(peer, twoHostPort), rpc.WithTransport(tr), rpc.WithMaxRecvMsgSize(5<<20))
		return err
	})
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	for _, n := range []int{0, 1, 100, 4096, 65536, 1 << 20, 4 << 20} {
		want := stamp(1, n, n)
		resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: want})
		if err != nil || !bytes.Equal(resp.Payload, want) {
			t.Fatalf("echo of %d bytes across the wire: %v", n, err)
		}
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				want := stamp(g, i, 64+(g*i*97)%20000)
				resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: want})
				if err != nil || !bytes.Equal(resp.Payload, want) {
					t.Errorf("caller %d call %d: %v", g, i, status.Convert(err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if _, err := c.Fail(ctx, &testpb.FailRequest{}); err != nil {
		t.Fatalf("telling the server to stop: %v", err)
	}
	checkCounters(t, before)
}
