package rpc_test

import (
	"context"
	"fmt"
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

type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	m := v.(*rawMsg)
	return append([]byte(nil), m.b[:m.n]...), nil
}
func (rawCodec) Size(v any) int { return v.(*rawMsg).n }
func (rawCodec) MarshalTo(b []byte, v any) error {
	copy(b, v.(*rawMsg).b[:])
	return nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
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
	lis, err := tr.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	cc, err := rpc.Dial(testCtx(t), "x://"+lis.Addr().String(), rpc.WithTransport(tr), rpc.WithCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

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
