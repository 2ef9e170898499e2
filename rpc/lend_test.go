package rpc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// lendServer serves the test service and the bench streams over tcp://,
// with opts; it stops when the test ends.
func lendServer(t *testing.T, opts ...rpc.ServerOption) *rpc.ClientConn {
	t.Helper()
	tr := tcp.New(tcp.Options{})
	srv := rpc.NewServer(opts...)
	testpb.RegisterTestServer(srv, newGate())
	srv.RegisterService(&benchStreams, struct{}{})
	return serveAndDial(t, tr, "127.0.0.1:0", srv)
}

// With LendRequestBytes, the handlers answer with the request's own
// (lent) bytes, unary and on a stream, 8 callers and 8 streams of 50
// messages at once: every answer
// is what was sent. A lent buffer given back before the response was sent
// would be reused by the next message read, and some answers would carry
// another call's bytes.
func TestLendRequestBytes(t *testing.T) {
	cc := lendServer(t, rpc.LendRequestBytes(true))
	c := testpb.NewTestClient(cc)
	// Each call has the hang guard to itself; a stream, which lives
	// through all its messages, has ten (a loaded machine under -race is
	// slow, and only a hang should fail this test).
	streamCtx, cancel := context.WithTimeout(context.Background(), 10*hangGuard)
	defer cancel()
	payload := func(r *rand.Rand) []byte {
		b := make([]byte, 1024+r.IntN(64<<10))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 50 {
				p := payload(r)
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: p})
				cancel()
				if err != nil {
					t.Errorf("call %d/%d: %v", g, i, err)
					return
				}
				if !bytes.Equal(resp.Payload, p) {
					t.Errorf("call %d/%d: the answer is not the request's %d bytes", g, i, len(p))
					return
				}
			}
		})
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			cs, err := cc.NewStream(streamCtx, &benchStreams.Streams[1], "/rdmarpc.bench.Streams/Ping")
			if err != nil {
				t.Error(err)
				return
			}
			resp := new(testpb.EchoResponse)
			for i := range 50 {
				p := payload(r)
				if err := cs.SendMsg(&testpb.EchoRequest{Payload: p}); err != nil {
					t.Errorf("stream %d, message %d: %v", g, i, err)
					return
				}
				if err := cs.RecvMsg(resp); err != nil {
					t.Errorf("stream %d, message %d: %v", g, i, err)
					return
				}
				if !bytes.Equal(resp.Payload, p) {
					t.Errorf("stream %d, message %d: the answer is not the message's %d bytes", g, i, len(p))
					return
				}
			}
			cs.CloseSend()
			if err := cs.RecvMsg(resp); err != io.EOF {
				t.Errorf("stream %d: end: %v", g, err)
			}
		})
	}
	wg.Wait()
}

// TestLendingSavesTheCopy: a 64 KiB unary echo allocates at least 32 KiB
// less per call, both ends counted, when the server lends the request's
// bytes (the server's copy of the payload is gone).
func TestLendingSavesTheCopy(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation sizes mean little under the race detector")
	}
	perCall := func(opts ...rpc.ServerOption) uint64 {
		c := testpb.NewTestClient(lendServer(t, opts...))
		req := &testpb.EchoRequest{Payload: make([]byte, 64<<10)}
		ctx := context.Background()
		call := func() {
			if _, err := c.Echo(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		for range 50 {
			call()
		}
		const calls = 300
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range calls {
			call()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / calls
	}
	copied, lent := perCall(), perCall(rpc.LendRequestBytes(true))
	t.Logf("64 KiB echo: %d bytes allocated per call copied, %d lent", copied, lent)
	if lent+32<<10 > copied {
		t.Errorf("lending saves %s per call, want at least 32 KiB", fmt.Sprint(int64(copied)-int64(lent)))
	}
}

// barrierEcho answers once n requests have been decoded, each with its own
// bytes: n calls at once that each need the others to have arrived.
type barrierEcho struct {
	testpb.UnimplementedTestServer
	mu      sync.Mutex
	arrived int
	n       int
	all     chan struct{}
}

func (b *barrierEcho) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	b.mu.Lock()
	if b.arrived++; b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

// TestLentRequestsDoNotStopTheReader: lent requests must not hold the
// transport's receive memory while their handlers run. Eight 64 KiB
// requests whose handlers each wait for all eight, on a server whose
// tcp:// connection buffers 128 KiB: when a lent request kept its frame
// (and the receive budget with it) until its response was sent, the reader
// stopped after two and the calls waited until their deadline (seen under
// load as every call of TestLendRequestBytes stuck).
func TestLentRequestsDoNotStopTheReader(t *testing.T) {
	const n = 8
	tr := tcp.New(tcp.Options{RecvQueueBytes: 128 << 10})
	srv := rpc.NewServer(rpc.LendRequestBytes(true))
	testpb.RegisterTestServer(srv, &barrierEcho{n: n, all: make(chan struct{})})
	cc := serveAndDial(t, tr, "127.0.0.1:0", srv, rpc.WithTransport(tcp.New(tcp.Options{}))) // the client's own budget
	c := testpb.NewTestClient(cc)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p := bytes.Repeat([]byte{byte(i)}, 64<<10)
			resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: p})
			if err != nil || !bytes.Equal(resp.GetPayload(), p) {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}

// Stream messages wait in their stream's inbox in the memory they arrived
// in (tcp:// lets the frame go, transport.Buffer.Detach): while they wait,
// the transport reads the next ones into other memory. A client sends 64
// distinct messages of 20-60 KiB while it receives their echoes, both
// ends' inboxes filling, with the server copying and lending: every echo
// is its message.
func TestQueuedStreamMessagesKeepTheirBytes(t *testing.T) {
	for _, lend := range []bool{false, true} {
		t.Run(fmt.Sprint("lend=", lend), func(t *testing.T) {
			cc := lendServer(t, rpc.LendRequestBytes(lend))
			ctx, cancel := context.WithTimeout(context.Background(), 10*hangGuard)
			defer cancel()
			cs, err := cc.NewStream(ctx, &benchStreams.Streams[1], "/rdmarpc.bench.Streams/Ping")
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(7, 7))
			msgs := make([][]byte, 64)
			for i := range msgs {
				msgs[i] = make([]byte, 20<<10+r.IntN(40<<10))
				for j := range msgs[i] {
					msgs[i][j] = byte(r.Uint32())
				}
			}
			sent := make(chan error, 1)
			go func() {
				for _, p := range msgs {
					if err := cs.SendMsg(&testpb.EchoRequest{Payload: p}); err != nil {
						sent <- err
						return
					}
				}
				sent <- cs.CloseSend()
			}()
			resp := new(testpb.EchoResponse)
			for i, p := range msgs {
				if err := cs.RecvMsg(resp); err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if !bytes.Equal(resp.Payload, p) {
					t.Fatalf("message %d: the echo is not the message's %d bytes", i, len(p))
				}
			}
			if err := cs.RecvMsg(resp); err != io.EOF {
				t.Fatalf("end: %v", err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
		})
	}
}
