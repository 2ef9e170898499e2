package rdma

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/rpc"
)

// rawMsg is a message rawCodec reads and writes in place, so that the
// heap objects a call costs are the RPC layer's and the transport's alone
// (as in rpc's TestUnaryAllocs).
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

// TestRPCUnaryAllocs: a unary call over rdma://, both ends in this
// process, allocates no more heap objects than over tcp:// (rpc's
// TestUnaryAllocs: the RPC layer's 2, the callStream and the handler's
// dec) and a margin of 1 for what scheduling may add (a pooled wait
// channel dropped by a GC), however often the transport's pollers sleep.
// Before, the poller's completion-channel wait allocated 4 objects each
// time: a handler that pauses made it 10 or more per call. (Without the
// pause the pollers stream through this tight loop and never wait.)
func TestRPCUnaryAllocs(t *testing.T) {
	ip := guestIP(t)
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	var (
		in  rawMsg
		out = &rawMsg{n: 64}
	)
	desc := &rpc.ServiceDesc{
		ServiceName: "allocs.Raw",
		Methods: []rpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&in); err != nil {
				return nil, err
			}
			// Longer than the poller streams after a completion (20 µs):
			// each end's poller goes back to its completion channel
			// between messages, as it does under a real handler's work
			// (not a wait for anything: any pause works, longer ones too).
			time.Sleep(time.Millisecond)
			return out, nil
		}}},
	}
	tr := New(Options{})
	srv := rpc.NewServer(rpc.ServerCodec(rawCodec{}))
	srv.RegisterService(desc, struct{}{})
	lis, err := tr.Listen(net.JoinHostPort(ip, "0"))
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, err := rpc.Dial(ctx, "rdma://"+lis.Addr().String(), rpc.WithTransport(tr), rpc.WithCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	req, reply := &rawMsg{n: 64}, new(rawMsg)
	call := func() {
		if err := cc.Invoke(context.Background(), "/allocs.Raw/Echo", req, reply); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 { // the connection, the first call's user-agent, workers, pools
		call()
	}
	const max = 3
	if n := testing.AllocsPerRun(300, call); n > max {
		t.Errorf("a unary call over rdma:// allocates %.2f heap objects, want at most %v", n, max)
	} else {
		t.Logf("%.2f heap objects per unary call", n)
	}
}
