package rpc_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"runtime/metrics"
	"sync"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// vecWatch is a transport whose connections are tcp://'s, with every
// vector SendVec is given shown to seen first.
type vecWatch struct {
	transport.Transport
	seen func([][]byte)
}

func (w vecWatch) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := w.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return w.wrap(c), nil
}

func (w vecWatch) Listen(addr string) (transport.Listener, error) {
	l, err := w.Transport.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &vecWatchListener{l, w}, nil
}

func (w vecWatch) wrap(c transport.Conn) transport.Conn {
	return &vecWatchConn{c, c.(transport.VectorSender), w.seen}
}

type vecWatchListener struct {
	transport.Listener
	w vecWatch
}

func (l *vecWatchListener) Accept(ctx context.Context) (transport.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return l.w.wrap(c), nil
}

type vecWatchConn struct {
	transport.Conn
	vs   transport.VectorSender
	seen func([][]byte)
}

func (c *vecWatchConn) SendVec(ctx context.Context, bufs [][]byte) error {
	c.seen(bufs)
	return c.vs.SendVec(ctx, bufs)
}

// A request's large payload reaches the transport's SendVec as the
// caller's own memory, not a copy, unary and on a stream, at 64 KiB and 1
// MiB; the server's answers go by SendVec too; everything comes back
// intact.
func TestLargePayloadReachesTheTransportUncopied(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[*byte]bool{} // the first byte of each part of 16 KiB or more
		vecs int
	)
	w := vecWatch{Transport: tcp.New(tcp.Options{}), seen: func(bufs [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		vecs++
		for _, b := range bufs {
			if len(b) >= 16<<10 {
				seen[&b[0]] = true
			}
		}
	}}
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, newGate())
	srv.RegisterService(&benchStreams, struct{}{})
	cc := serveAndDial(t, w, "127.0.0.1:0", srv)
	c := testpb.NewTestClient(cc)
	uncopied := func(p []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[&p[0]]
	}
	for _, size := range []int{64 << 10, 1 << 20} {
		p := randomPayload(uint64(size), size)
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: p})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.Payload, p) {
			t.Fatalf("%d bytes: the answer differs", size)
		}
		if !uncopied(p) {
			t.Errorf("%d bytes unary: the request's payload was not among SendVec's parts", size)
		}
		p = randomPayload(uint64(size)+1, size)
		ctx, cancel = context.WithTimeout(context.Background(), hangGuard)
		cs, err := cc.NewStream(ctx, &benchStreams.Streams[1], "/rdmarpc.bench.Streams/Ping")
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		out := new(testpb.EchoResponse)
		if err := cs.SendMsg(&testpb.EchoRequest{Payload: p}); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(out); err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		if err := cs.RecvMsg(out); err != io.EOF {
			t.Errorf("stream end: %v", err)
		}
		cancel()
		if !bytes.Equal(out.Payload, p) {
			t.Fatalf("%d bytes: the stream's answer differs", size)
		}
		if !uncopied(p) {
			t.Errorf("%d bytes streamed: the message's payload was not among SendVec's parts", size)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if vecs < 8 { // each request and each answer
		t.Errorf("%d messages sent by SendVec; want the 4 requests and the 4 answers", vecs)
	}
}

func randomPayload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Over tcp://, 64 KiB and 1 MiB messages, unary and streamed, from 4
// callers and 4 streams at once, with and without lent requests (whose
// answers are sent from the request's frame, reused once the answer is
// sent), come back intact: some go straight from the message to the
// socket, others are copied when they must wait, and none is sent from
// memory that changed after SendVec returned.
func TestLargeMessagesRoundTripOverTCP(t *testing.T) {
	for _, lend := range []bool{false, true} {
		name := "copying"
		if lend {
			name = "lending"
		}
		t.Run(name, func(t *testing.T) {
			cc := lendServer(t, rpc.LendRequestBytes(lend))
			c := testpb.NewTestClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 4*hangGuard)
			defer cancel()
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range 12 {
						size := []int{64 << 10, 1 << 20, 16<<10 + 3}[i%3]
						p := randomPayload(uint64(g*100+i), size)
						resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: p})
						if err != nil {
							t.Errorf("call %d/%d: %v", g, i, err)
							return
						}
						if !bytes.Equal(resp.Payload, p) {
							t.Errorf("call %d/%d: the answer differs from the %d bytes sent", g, i, size)
							return
						}
					}
				})
				wg.Go(func() {
					cs, err := cc.NewStream(ctx, &benchStreams.Streams[1], "/rdmarpc.bench.Streams/Ping")
					if err != nil {
						t.Error(err)
						return
					}
					// Two in flight, so that messages also queue behind
					// each other.
					var sent [][]byte
					resp := new(testpb.EchoResponse)
					for i := range 12 {
						size := []int{1 << 20, 64 << 10}[i%2]
						p := randomPayload(uint64(g*100+i+50), size)
						if err := cs.SendMsg(&testpb.EchoRequest{Payload: p}); err != nil {
							t.Errorf("stream %d, message %d: %v", g, i, err)
							return
						}
						sent = append(sent, p)
						if i%2 == 0 {
							continue
						}
						for _, p := range sent {
							if err := cs.RecvMsg(resp); err != nil {
								t.Errorf("stream %d, message %d: %v", g, i, err)
								return
							}
							if !bytes.Equal(resp.Payload, p) {
								t.Errorf("stream %d, message %d: the answer differs from the %d bytes sent", g, i, len(p))
								return
							}
						}
						sent = sent[:0]
					}
					cs.CloseSend()
					if err := cs.RecvMsg(resp); err != io.EOF {
						t.Errorf("stream %d: end: %v", g, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestLargeRequestsStartNoGoroutine: 64 KiB calls one after another on a
// tcp:// connection run where small ones do (on the reader, or a worker
// whose stack has grown already), not each on a goroutine of its own,
// whose fresh stack protobuf's decoding then grew at every call (a third
// of the server's instructions per 64 KiB call under callgrind). It
// failed with one goroutine started per call.
func TestLargeRequestsStartNoGoroutine(t *testing.T) {
	cc := lendServer(t)
	c := testpb.NewTestClient(cc)
	ctx := testCtx(t)
	p := randomPayload(1, 64<<10)
	call := func() {
		resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resp.Payload, p) {
			t.Fatal("the answer differs from what was sent")
		}
	}
	for range 10 {
		call()
	}
	const calls = 200
	before := goroutinesCreated()
	for range calls {
		call()
	}
	if n := goroutinesCreated() - before; n > calls/4 {
		t.Errorf("%d goroutines created over %d calls of 64 KiB", n, calls)
	}
}

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
