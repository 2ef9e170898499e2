package rpc_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// TestLargeMessagesKeepSeveralInFlight: on a stream of 64 KiB messages the
// receiver's window grows by itself, so once the client has read one, the
// server sends several more without waiting for the client to read them.
// With the 64 KiB window it had, each message waited a round trip for the
// grant of the one before (stream flood of 64 KiB over tcp://, separate
// processes: 3.1k messages/s, 5.1k with the growth).
func TestLargeMessagesKeepSeveralInFlight(t *testing.T) {
	var sent atomic.Int64
	desc := rpc.ServiceDesc{
		ServiceName: "grow.Flood",
		HandlerType: (*any)(nil),
		Streams: []rpc.StreamDesc{{StreamName: "Flood", ServerStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			out := &testpb.EchoResponse{Payload: make([]byte, 64<<10)}
			for range 16 {
				if err := ss.SendMsg(out); err != nil {
					return err
				}
				sent.Add(1)
			}
			return nil
		}}},
	}
	tr := tcp.New(tcp.Options{})
	srv := rpc.NewServer()
	srv.RegisterService(&desc, struct{}{})
	cc := serveAndDial(t, tr, "127.0.0.1:0", srv)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	cs, err := cc.NewStream(ctx, &desc.Streams[0], "/grow.Flood/Flood")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	m := new(testpb.EchoResponse)
	if err := cs.RecvMsg(m); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the server to send 3 messages past the one read", func() bool { return sent.Load() >= 4 })
	cancel()
}
