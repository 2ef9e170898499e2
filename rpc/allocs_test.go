package rpc_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// rawMsg is a message its codec (rawCodec) reads and writes in place, so
// that the heap objects a call costs are the RPC layer's and the
// transport's alone.
type rawMsg struct {
	n int
	b [64]byte
}

// bigMsg is rawMsg for large messages: its codec fills b in place.
type bigMsg struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	if m, ok := v.(*bigMsg); ok {
		return append([]byte(nil), m.b...), nil
	}
	m := v.(*rawMsg)
	return append([]byte(nil), m.b[:m.n]...), nil
}
func (rawCodec) Size(v any) int {
	if m, ok := v.(*bigMsg); ok {
		return len(m.b)
	}
	return v.(*rawMsg).n
}
func (rawCodec) MarshalTo(b []byte, v any) error {
	if m, ok := v.(*bigMsg); ok {
		copy(b, m.b)
		return nil
	}
	copy(b, v.(*rawMsg).b[:])
	return nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	if m, ok := v.(*bigMsg); ok {
		if len(data) != len(m.b) {
			return fmt.Errorf("raw: %d bytes, want %d", len(data), len(m.b))
		}
		copy(m.b, data)
		return nil
	}
	m := v.(*rawMsg)
	if len(data) > len(m.b) {
		return fmt.Errorf("raw: %d bytes, room for %d", len(data), len(m.b))
	}
	m.n = copy(m.b[:], data)
	return nil
}

// TestUnaryAllocs fails when a unary call allocates more heap objects than
// it does today, both ends counted, over the TCP and the pipe transport.
// The messages are decoded in place and the handler answers with a message
// it keeps, so nothing of the messages' own is counted. What remains over
// TCP is the RPC layer's two: the server's callStream (the admitted
// request, the handler's context and its serverCall in one) and the
// handler's dec; it was 12 before the workers, the call's own context and
// the pooled call options. The pipe transport adds 8 of its own.
func TestUnaryAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	for _, c := range []struct {
		name string
		tr   transport.Transport
		addr string
		max  float64
	}{
		{"tcp", tcp.New(tcp.Options{}), "127.0.0.1:0", 2},
		{"pipe", pipe.New(pipe.Options{}), "allocs:0", 10},
	} {
		t.Run(c.name, func(t *testing.T) { testUnaryAllocs(t, c.tr, c.addr, c.max) })
	}
}

func testUnaryAllocs(t *testing.T, tr transport.Transport, addr string, maxAllocs float64) {
	var (
		in  rawMsg // the handler's request, one call at a time
		out = &rawMsg{n: 64}
	)
	desc := &rpc.ServiceDesc{
		ServiceName: "allocs.Raw",
		Methods: []rpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&in); err != nil {
				return nil, err
			}
			return out, nil
		}}},
	}
	srv := rpc.NewServer(rpc.ServerCodec(rawCodec{}))
	srv.RegisterService(desc, struct{}{})
	cc := serveAndDial(t, tr, addr, srv, rpc.WithCodec(rawCodec{}))

	req, reply := &rawMsg{n: 64}, new(rawMsg)
	ctx := context.Background()
	call := func() {
		if err := cc.Invoke(ctx, "/allocs.Raw/Echo", req, reply); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // the connection, the user-agent's first call, workers, pools
		call()
	}
	// AllocsPerRun counts the whole process, so the server's allocations
	// count too: they happen before the response that ends each call.
	if n := testing.AllocsPerRun(1000, call); n > maxAllocs {
		t.Errorf("a unary call allocates %.2f heap objects, want at most %v", n, maxAllocs)
	} else {
		t.Logf("%.2f heap objects per unary call", n)
	}
}

// TestStreamedMessageAllocs: a 64 KiB message on a stream costs no more
// heap objects than a unary call of the same size, both ends counted,
// over TCP. Each large message read grants the sender window back; that
// update was queued for a goroutine started for it, with a context, a
// timer and an encoded frame of its own: 18 objects per streamed round
// trip against 3 per unary call. Now the reading goroutine sends it itself.
func TestStreamedMessageAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	const size = 64 << 10
	var (
		in  = &bigMsg{b: make([]byte, size)} // the handlers' request, one at a time
		out = &bigMsg{b: make([]byte, size)}
	)
	desc := &rpc.ServiceDesc{
		ServiceName: "allocs.Big",
		Methods: []rpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			if err := dec(in); err != nil {
				return nil, err
			}
			return out, nil
		}}},
		Streams: []rpc.StreamDesc{{StreamName: "Ping", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			for {
				if err := ss.RecvMsg(in); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
				if err := ss.SendMsg(out); err != nil {
					return err
				}
			}
		}}},
	}
	tr := tcp.New(tcp.Options{})
	srv := rpc.NewServer(rpc.ServerCodec(rawCodec{}))
	srv.RegisterService(desc, struct{}{})
	cc := serveAndDial(t, tr, "127.0.0.1:0", srv, rpc.WithCodec(rawCodec{}))

	req, reply := &bigMsg{b: make([]byte, size)}, &bigMsg{b: make([]byte, size)}
	ctx := context.Background()
	unary := func() {
		if err := cc.Invoke(ctx, "/allocs.Big/Echo", req, reply); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := cc.NewStream(ctx, &desc.Streams[0], "/allocs.Big/Ping")
	if err != nil {
		t.Fatal(err)
	}
	streamed := func() {
		if err := cs.SendMsg(req); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(reply); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // the connection, workers, pools, the stream's queues
		unary()
		streamed()
	}
	u := testing.AllocsPerRun(500, unary)
	s := testing.AllocsPerRun(500, streamed)
	t.Logf("64 KiB: %.2f heap objects per unary call, %.2f per streamed round trip", u, s)
	if s > u {
		t.Errorf("a streamed 64 KiB round trip allocates %.2f heap objects, a unary call %.2f: want no more", s, u)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(reply); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
}
