package rpc_test

import (
	"context"
	"io"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// gatedPing is a bidi streaming service whose handler tells the test each
// message it got (got) and answers it only when told (reply).
type gatedPing struct {
	got   chan byte
	reply chan struct{}
	desc  rpc.ServiceDesc
}

func newGatedPing() *gatedPing {
	g := &gatedPing{got: make(chan byte, 1), reply: make(chan struct{})}
	g.desc = rpc.ServiceDesc{
		ServiceName: "rdmarpc.test.Gated",
		HandlerType: (*any)(nil),
		Streams: []rpc.StreamDesc{{StreamName: "Ping", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, ss rpc.ServerStream) error {
				for {
					in := new(testpb.EchoRequest)
					if err := ss.RecvMsg(in); err != nil {
						if err == io.EOF {
							return nil
						}
						return err
					}
					g.got <- in.Payload[0]
					select {
					case <-g.reply:
					case <-ss.Context().Done():
						return ss.Context().Err()
					}
					if err := ss.SendMsg(&testpb.EchoResponse{Payload: in.Payload}); err != nil {
						return err
					}
				}
			}}},
	}
	return g
}

// loneStreamTransports are the transports that report arrivals, over which
// a lone stream's receivers read for themselves.
func loneStreamTransports() []struct {
	name string
	tr   transport.Transport
	addr string
} {
	return []struct {
		name string
		tr   transport.Transport
		addr string
	}{
		{"pipe", pipe.New(pipe.Options{}), "lone:0"},
		{"tcp", tcp.New(tcp.Options{}), "127.0.0.1:0"},
	}
}

// startGated serves g and the Test service (gate) on tr and dials it.
func startGated(t *testing.T, tr transport.Transport, addr string, g *gatedPing, gt *gate) (*rpc.Server, *rpc.ClientConn) {
	srv := rpc.NewServer()
	srv.RegisterService(&g.desc, struct{}{})
	testpb.RegisterTestServer(srv, gt)
	cc := serveAndDial(t, tr, addr, srv)
	return srv, cc
}

// TestLoneStreamReadsItsOwn: on a stream alone on its connection, each
// end's receiver reads its own messages once the first have come: the
// client's RecvMsg holds the read turn when the server's answer comes, and
// the server's handler, lent the connection's reading, reads the client's
// next message in its RecvMsg. No goroutine hands a message over. Before,
// each end's reader goroutine read every message and handed it to the
// receiver (the hand-offs counted here), a wake-up per message each way.
// The test paces the two ends so that each receiver is reading before the
// other end sends: no timing decides the count.
func TestLoneStreamReadsItsOwn(t *testing.T) {
	for _, c := range loneStreamTransports() {
		t.Run(c.name, func(t *testing.T) {
			g := newGatedPing()
			srv, cc := startGated(t, c.tr, c.addr, g, newGate())
			ctx := testCtx(t)
			st, err := cc.NewStream(ctx, &g.desc.Streams[0], "/rdmarpc.test.Gated/Ping")
			if err != nil {
				t.Fatal(err)
			}
			// The first message each way goes through the reader, which
			// then leaves the reading to the receiver.
			const warm, rounds = 1, 50
			var clientBefore, serverBefore uint64
			for i := range warm + rounds {
				if i == warm {
					clientBefore, serverBefore = rpc.StreamHandoffs(cc), rpc.ServerStreamHandoffs(srv)
				}
				if err := st.SendMsg(&testpb.EchoRequest{Payload: []byte{byte(i)}}); err != nil {
					t.Fatalf("SendMsg %d: %v", i, err)
				}
				if b := <-g.got; b != byte(i) {
					t.Fatalf("the handler got %d, want %d", b, i)
				}
				if i >= warm {
					// The reader goroutine has left the turn idle
					// after the message before (it may still be on
					// its way there).
					turnIs(t, cc, "idle", 0)
				}
				recvd := make(chan error, 1)
				go func() {
					resp := new(testpb.EchoResponse)
					err := st.RecvMsg(resp)
					if err == nil && resp.Payload[0] != byte(i) {
						t.Errorf("RecvMsg %d: got %d", i, resp.Payload[0])
					}
					recvd <- err
				}()
				if i >= warm {
					turnIs(t, cc, "caller", 0) // the client's receiver reads
				}
				g.reply <- struct{}{}
				if err := <-recvd; err != nil {
					t.Fatalf("RecvMsg %d: %v", i, err)
				}
				{
					waitUntil(t, "the handler to read for itself", func() bool { return rpc.ServerOwnReaders(srv) == 1 })
				}
			}
			if n := rpc.StreamHandoffs(cc) - clientBefore; n != 0 {
				t.Errorf("client: %d of %d messages handed to the receiver by another goroutine, want 0", n, rounds)
			}
			if n := rpc.ServerStreamHandoffs(srv) - serverBefore; n != 0 {
				t.Errorf("server: %d of %d messages handed to the handler by another goroutine, want 0", n, rounds)
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := st.RecvMsg(new(testpb.EchoResponse)); err != io.EOF {
				t.Fatalf("RecvMsg after CloseSend: %v, want io.EOF", err)
			}
		})
	}
}

// TestLoneStreamReadersServeOthers: while a lone stream's receivers hold
// the reading at both ends (the client's RecvMsg waits for an answer the
// handler holds back; the handler, lent the reading, waits in RecvMsg),
// unary calls on the same connection are answered: the client's receiver
// reads their responses, the handler's RecvMsg reads their requests and
// hands them to a worker. Then the handler keeps a message without reading
// on (the reading lent to it, unused) while more calls come: the first
// arrival hands the reading on. The stream then goes on, and ends.
func TestLoneStreamReadersServeOthers(t *testing.T) {
	for _, c := range loneStreamTransports() {
		t.Run(c.name, func(t *testing.T) {
			g := newGatedPing()
			srv, cc := startGated(t, c.tr, c.addr, g, newGate())
			client := testpb.NewTestClient(cc)
			ctx := testCtx(t)
			st, err := cc.NewStream(ctx, &g.desc.Streams[0], "/rdmarpc.test.Gated/Ping")
			if err != nil {
				t.Fatal(err)
			}
			// ping sends i and takes the answer; own: the client's
			// receiver holds the read turn before the answer goes (the
			// turn was left idle for it).
			ping := func(i byte, own bool) {
				t.Helper()
				if err := st.SendMsg(&testpb.EchoRequest{Payload: []byte{i}}); err != nil {
					t.Fatalf("SendMsg %d: %v", i, err)
				}
				if b := <-g.got; b != i {
					t.Fatalf("the handler got %d, want %d", b, i)
				}
				if own {
					turnIs(t, cc, "idle", 0) // left for the receiver
				}
				recvd := make(chan error, 1)
				go func() {
					resp := new(testpb.EchoResponse)
					err := st.RecvMsg(resp)
					if err == nil && resp.Payload[0] != i {
						t.Errorf("RecvMsg %d: got %d", i, resp.Payload[0])
					}
					recvd <- err
				}()
				if own {
					turnIs(t, cc, "caller", 0)
				}
				g.reply <- struct{}{}
				if err := <-recvd; err != nil {
					t.Fatalf("RecvMsg %d: %v", i, err)
				}
			}
			calls := func(what string) {
				t.Helper()
				for k := range 10 {
					if _, err := client.Echo(ctx, &testpb.EchoRequest{Payload: []byte{byte(k)}}); err != nil {
						t.Fatalf("Echo %d %s: %v", k, what, err)
					}
				}
			}
			ping(0, false)
			ping(1, true)
			// The client's receiver waits for an answer the handler holds
			// back, lent the reading and not reading: the calls' requests
			// hand the server's reading on, the receiver reads their
			// responses.
			if err := st.SendMsg(&testpb.EchoRequest{Payload: []byte{2}}); err != nil {
				t.Fatal(err)
			}
			if b := <-g.got; b != 2 {
				t.Fatalf("the handler got %d, want 2", b)
			}
			turnIs(t, cc, "idle", 0)
			recvd := make(chan error, 1)
			go func() { recvd <- st.RecvMsg(new(testpb.EchoResponse)) }()
			turnIs(t, cc, "caller", 0)
			calls("while the stream's receiver holds the read turn and the handler its message")
			g.reply <- struct{}{}
			if err := <-recvd; err != nil {
				t.Fatalf("RecvMsg 2: %v", err)
			}
			// Lone again: the reading comes back to the handler after the
			// messages of the backoff a lend handed on unused costs
			// (conn.BackoffMessages, 64).
			for i := range 70 {
				ping(byte(3+i), true)
			}
			waitUntil(t, "the handler to read for itself", func() bool { return rpc.ServerOwnReaders(srv) == 1 })
			calls("while the handler reads for itself")
			ping(100, false) // the calls left the client's turn to the reader goroutine
			ping(101, true)
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := st.RecvMsg(new(testpb.EchoResponse)); err != io.EOF {
				t.Fatalf("RecvMsg after CloseSend: %v, want io.EOF", err)
			}
			calls("after the stream")
			st2, err := cc.NewStream(ctx, &g.desc.Streams[0], "/rdmarpc.test.Gated/Ping")
			if err != nil {
				t.Fatal(err)
			}
			st = st2
			ping(102, false)
			ping(103, true)
			cctx, cancel := context.WithCancel(ctx)
			st3, err := cc.NewStream(cctx, &g.desc.Streams[0], "/rdmarpc.test.Gated/Ping")
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := st3.RecvMsg(new(testpb.EchoResponse)); err == nil {
				t.Fatal("RecvMsg on a canceled stream: a message")
			}
			ping(104, false)
		})
	}
}
