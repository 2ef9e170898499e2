package rpc_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// holdService's bidirectional /t.Refuse/Hold greets with one message, then
// holds its stream slot until the client half-closes. Its handlers count
// in started, the messages they read in got.
func holdService(started, got *atomic.Int64) *rpc.ServiceDesc {
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
					got.Add(1)
				}
			},
		}},
	}
}

var holdDesc = &rpc.StreamDesc{ClientStreams: true, ServerStreams: true}

// startHold serves holdService with one stream slot per connection and
// dials it, through tr, which tells the client the server runs 100: an
// rdmarpc client keeps to the server's limit, so only a server that
// misstates it makes the client meet the refusals these tests are about.
func startHold(t *testing.T, tr *spy, started *atomic.Int64) *rpc.ClientConn {
	t.Helper()
	return startHoldCounting(t, tr, started, new(atomic.Int64))
}

func startHoldCounting(t *testing.T, tr *spy, started, got *atomic.Int64) *rpc.ClientConn {
	t.Helper()
	tr.claimLimit = 100
	srv := rpc.NewServer(rpc.MaxConcurrentStreams(1))
	srv.RegisterService(holdService(started, got), struct{}{})
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

// refusedAfter opens a second stream while the first holds the one slot,
// sends msgs on it before the client reads the refusal (the client's end
// of the pipe is stalled until the messages reached the server), and
// returns it with the first stream.
func refusedAfter(t *testing.T, ctx context.Context, tr *spy, cc *rpc.ClientConn, msgs ...*wrapperspb.StringValue) (a, b rpc.ClientStream) {
	t.Helper()
	a = greeted(t, ctx, cc)
	client := tr.client(0)
	client.Conn.(*pipe.Conn).Stall(true)
	b, err := cc.NewStream(ctx, holdDesc, "/t.Refuse/Hold")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := b.SendMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	server := tr.server(0)
	waitUntil(t, "the messages to reach the server", func() bool { return server.received[wire.KindMessage].Load() == int64(len(msgs)) })
	client.Conn.(*pipe.Conn).Stall(false)
	return a, b
}

// TestRefusedStreamMessagesSentAgain: a message sent before the refusal
// came is kept and sent again on the stream opened again: the handler
// gets it exactly once.
func TestRefusedStreamMessagesSentAgain(t *testing.T) {
	var started, got atomic.Int64
	tr := newSpy(pipe.New(pipe.Options{}))
	cc := startHoldCounting(t, tr, &started, &got)
	ctx := testCtx(t)

	a, b := refusedAfter(t, ctx, tr, cc, wrapperspb.String("data"))
	finish(t, a)
	if err := b.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("refused stream, after the slot freed: %v, want its greeting", err)
	}
	finish(t, b)
	if n := started.Load(); n != 2 {
		t.Fatalf("%d handlers ran, want 2", n)
	}
	if n := got.Load(); n != 1 {
		t.Fatalf("the handlers read %d messages, want the 1 sent", n)
	}
}

// TestRefusedStreamPastKeptNotResent: once more was sent on the stream
// than the client keeps for sending again (maxKept, half the initial
// window), a refusal is the caller's to see: RecvMsg returns Unavailable,
// and no second handler runs.
func TestRefusedStreamPastKeptNotResent(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []*wrapperspb.StringValue
	}{
		{"one large", []*wrapperspb.StringValue{wrapperspb.String(strings.Repeat("x", 40<<10))}},
		{"two that add up", []*wrapperspb.StringValue{wrapperspb.String(strings.Repeat("x", 20<<10)), wrapperspb.String(strings.Repeat("y", 20<<10))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var started, got atomic.Int64
			tr := newSpy(pipe.New(pipe.Options{}))
			cc := startHoldCounting(t, tr, &started, &got)
			ctx := testCtx(t)

			a, b := refusedAfter(t, ctx, tr, cc, tc.msgs...)
			if err := b.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Unavailable {
				t.Fatalf("refused stream after its messages: %v, want Unavailable", err)
			}
			finish(t, a)
			if n := started.Load(); n != 1 {
				t.Fatalf("%d handlers ran, want 1", n)
			}
			if n := got.Load(); n != 0 {
				t.Fatalf("the handlers read %d messages, want none (the stream was refused)", n)
			}
		})
	}
}
