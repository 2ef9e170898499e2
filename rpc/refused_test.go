package rpc_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// holdService's bidirectional /t.Refuse/Hold greets with one message, then
// holds its stream slot until the client half-closes. Its handlers count
// in started.
func holdService(started *atomic.Int64) *rpc.ServiceDesc {
	return &rpc.ServiceDesc{
		ServiceName: "t.Refuse",
		HandlerType: (*any)(nil),
		Streams: []rpc.StreamDesc{{
			StreamName:    "Hold",
			ClientStreams: true,
			ServerStreams: true,
			Handler: func(_ any, ss rpc.ServerStream) error {
				started.Add(1)
				if err := ss.SendMsg(wrapperspb.String("hello")); err != nil {
					return err
				}
				for {
					if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
						if err == io.EOF {
							return nil
						}
						return err
					}
				}
			},
		}},
	}
}

var holdDesc = &rpc.StreamDesc{ClientStreams: true, ServerStreams: true}

// startHold serves holdService with one stream slot per connection and
// dials it.
func startHold(t *testing.T, tr *spy, started *atomic.Int64) *rpc.ClientConn {
	t.Helper()
	srv := rpc.NewServer(rpc.MaxConcurrentStreams(1))
	srv.RegisterService(holdService(started), struct{}{})
	lis, err := tr.Listen("refuse:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	cc, err := rpc.Dial(testCtx(t), "pipe://"+lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// greeted opens a Hold stream and reads its greeting: its handler runs.
func greeted(t *testing.T, ctx context.Context, cc *rpc.ClientConn) rpc.ClientStream {
	t.Helper()
	s, err := cc.NewStream(ctx, holdDesc, "/t.Refuse/Hold")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("greeting: %v", err)
	}
	return s
}

// finish half-closes s and checks that it ends OK.
func finish(t *testing.T, s rpc.ClientStream) {
	t.Helper()
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("end of the stream: %v, want io.EOF", err)
	}
}

// TestRefusedStreamResent: a stream the server refuses (its stream slots
// are full) before the client sent anything on it past the OPEN is opened
// again, transparently, once a slot frees, as gRPC's transparent retry
// does for REFUSED_STREAM: the caller sees the stream work, and its
// handler runs once. (Before: RecvMsg returned Unavailable "server busy".)
func TestRefusedStreamResent(t *testing.T) {
	var started atomic.Int64
	tr := newSpy(pipe.New(pipe.Options{}))
	cc := startHold(t, tr, &started)
	ctx := testCtx(t)

	a := greeted(t, ctx, cc) // takes the one slot
	b, err := cc.NewStream(ctx, holdDesc, "/t.Refuse/Hold")
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(t, tr)
	finish(t, a) // frees the slot
	if err := b.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("refused stream, after the slot freed: %v, want its greeting", err)
	}
	finish(t, b)
	if n := started.Load(); n != 2 {
		t.Fatalf("%d handlers ran, want 2", n)
	}
	if n := tr.dials.Load(); n != 1 {
		t.Fatalf("%d connections dialled, want 1", n)
	}
}

// waitRefused waits for the server's first refusal (by then it may have
// refused the stream again: the client retries with a backoff).
func waitRefused(t *testing.T, tr *spy) {
	t.Helper()
	client := tr.client(0)
	waitUntil(t, "the server to refuse the second stream", func() bool { return client.received[wire.KindTrailers].Load() >= 1 })
}

// TestRefusedStreamHalfClosed: a half-close made before or while the
// stream is refused goes again after its new OPEN, and the handler sees
// it.
func TestRefusedStreamHalfClosed(t *testing.T) {
	var started atomic.Int64
	tr := newSpy(pipe.New(pipe.Options{}))
	cc := startHold(t, tr, &started)
	ctx := testCtx(t)

	a := greeted(t, ctx, cc)
	b, err := cc.NewStream(ctx, holdDesc, "/t.Refuse/Hold")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, tr)
	finish(t, a)
	if err := b.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("refused stream, after the slot freed: %v, want its greeting", err)
	}
	if err := b.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		t.Fatalf("end of the half-closed stream: %v, want io.EOF", err)
	}
	if n := started.Load(); n != 2 {
		t.Fatalf("%d handlers ran, want 2", n)
	}
}

// TestRefusedStreamCancelled: a refused stream waiting for a slot ends
// with its caller's cancel: RecvMsg returns Canceled, SendMsg io.EOF, and
// nothing of it stays (goleak checks the goroutine that waited).
func TestRefusedStreamCancelled(t *testing.T) {
	var started atomic.Int64
	tr := newSpy(pipe.New(pipe.Options{}))
	cc := startHold(t, tr, &started)
	ctx := testCtx(t)

	a := greeted(t, ctx, cc)
	bctx, cancel := context.WithCancel(ctx)
	b, err := cc.NewStream(bctx, holdDesc, "/t.Refuse/Hold")
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(t, tr)
	cancel()
	if err := b.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled refused stream: %v, want Canceled", err)
	}
	if err := b.SendMsg(wrapperspb.String("data")); err != io.EOF {
		t.Fatalf("SendMsg on the cancelled stream: %v, want io.EOF", err)
	}
	finish(t, a)
	if n := started.Load(); n != 1 {
		t.Fatalf("%d handlers ran, want 1", n)
	}
}

// TestRefusedStreamAfterSendNotResent: once the client sent a message on
// the stream, a refusal is the caller's to see (the message is gone with
// the refused stream): RecvMsg returns Unavailable, and no second handler
// runs.
func TestRefusedStreamAfterSendNotResent(t *testing.T) {
	var started atomic.Int64
	tr := newSpy(pipe.New(pipe.Options{}))
	cc := startHold(t, tr, &started)
	ctx := testCtx(t)

	a := greeted(t, ctx, cc)
	// The client reads nothing until its message has left: the refusal
	// waits in the pipe.
	client := tr.client(0)
	client.Conn.(*pipe.Conn).Stall(true)
	b, err := cc.NewStream(ctx, holdDesc, "/t.Refuse/Hold")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SendMsg(wrapperspb.String("data")); err != nil {
		t.Fatal(err)
	}
	server := tr.server(0)
	waitUntil(t, "the message to reach the server", func() bool { return server.received[wire.KindMessage].Load() == 1 })
	client.Conn.(*pipe.Conn).Stall(false)
	if err := b.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
		t.Fatalf("refused stream after a message: %v, want Unavailable", err)
	}
	finish(t, a)
	if n := started.Load(); n != 1 {
		t.Fatalf("%d handlers ran, want 1", n)
	}
}
