package rpc_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// When a client resets a stream, its handler's context has ended by the
// time RecvMsg reports the reset: a handler that tells a cancelled call
// from a broken one by its context (as gRPC-go's may) sees the cancel.
func TestResetEndsContextBeforeRecvFails(t *testing.T) {
	var ended, ctxDone atomic.Int64
	desc := rpc.ServiceDesc{
		ServiceName: "reset.Streams",
		HandlerType: (*any)(nil),
		Streams: []rpc.StreamDesc{{StreamName: "Ping", ClientStreams: true, ServerStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			for {
				in := new(testpb.EchoRequest)
				if err := ss.RecvMsg(in); err != nil {
					if ss.Context().Err() != nil {
						ctxDone.Add(1)
					}
					ended.Add(1)
					return err
				}
				if err := ss.SendMsg(&testpb.EchoResponse{}); err != nil {
					return err
				}
			}
		}}},
	}
	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer()
	srv.RegisterService(&desc, struct{}{})
	lis, err := tr.Listen("reset:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-done
	}()
	cc, err := rpc.Dial(testCtx(t), "pipe://"+lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	const streams = 2000
	for range streams {
		ctx, cancel := context.WithCancel(testCtx(t))
		cs, err := cc.NewStream(ctx, &desc.Streams[0], "/reset.Streams/Ping")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(&testpb.EchoRequest{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(testpb.EchoResponse)); err != nil {
			t.Fatal(err)
		}
		cancel() // a RESET goes to the server
	}
	waitUntil(t, "every handler's end", func() bool { return ended.Load() == streams })
	if n := ctxDone.Load(); n != streams {
		t.Errorf("%d of %d handlers saw RecvMsg fail before their context ended", streams-n, streams)
	}
}
