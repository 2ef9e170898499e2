package rpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// heldGuard bounds the waits for what should happen by itself: reaching it
// is a hang (the bytes never came back), never a verdict on speed.
const heldGuard = 30 * time.Second

// heldService is one server-streaming method, /t.H/Four, that sends four
// messages of 1000 bytes and returns: its TRAILERS come after them.
var heldService = ServiceDesc{
	ServiceName: "t.H",
	HandlerType: (*any)(nil),
	Streams: []StreamDesc{{
		StreamName:    "Four",
		ServerStreams: true,
		Handler: func(_ any, ss ServerStream) error {
			for range 4 {
				if err := ss.SendMsg(wrapperspb.Bytes(make([]byte, 1000))); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

// TestUnreadMessagesAfterTrailersReturned: a stream the server ended with
// TRAILERS keeps its unread messages for RecvMsg, counted in the link's
// held bytes. Once the caller abandons the stream, as gRPC-go's rules say
// it may (its context done; or RecvMsg returned its final error), they are
// dropped and their bytes given back to the connection's bound.
func TestUnreadMessagesAfterTrailersReturned(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	lis, err := tr.Listen("held")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer()
	srv.RegisterService(&heldService, struct{}{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	desc := &StreamDesc{ServerStreams: true}

	// open starts a stream, on a connection of its own, whose four
	// messages and TRAILERS have all arrived (the stream's context ends
	// with the TRAILERS), none read.
	open := func(t *testing.T, ctx context.Context) (*clientStream, int64) {
		t.Helper()
		cc, err := Dial(context.Background(), "pipe://held", WithTransport(tr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		s, err := cc.NewStream(ctx, desc, "/t.H/Four")
		if err != nil {
			t.Fatal(err)
		}
		cs := s.(*clientStream)
		// The handler reads nothing: it sends and returns at once.
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-cs.Context().Done():
		case <-time.After(heldGuard):
			t.Fatalf("the stream did not end after %v", heldGuard)
		}
		cs.mu.Lock()
		st := cs.endStatus
		cs.mu.Unlock()
		if st.Err() != nil {
			t.Fatalf("the stream ended with %v, want OK from its TRAILERS", st)
		}
		held := cs.l.held.Load()
		if held == 0 {
			t.Fatal("nothing held for the four unread messages")
		}
		return cs, held
	}
	waitFreed := func(t *testing.T, cs *clientStream, what string, was int64) {
		t.Helper()
		deadline := time.Now().Add(heldGuard)
		for cs.l.held.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the connection still holds %d bytes of unread stream messages after %v (%d before)", what, cs.l.held.Load(), heldGuard, was)
			}
			time.Sleep(time.Millisecond)
		}
	}

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cs, held := open(t, ctx)
		cancel()
		waitFreed(t, cs, "after the caller's cancel", held)
		if err := cs.RecvMsg(new(wrapperspb.BytesValue)); err == nil {
			t.Fatal("RecvMsg after the cancel returned a dropped message")
		}
	})
	t.Run("parent cancel", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		ctx, cancelChild := context.WithCancel(parent)
		defer cancelChild()
		cs, held := open(t, ctx)
		// The caller's context ends through its parent.
		cancel()
		waitFreed(t, cs, "after the caller's context ended through its parent", held)
	})
	t.Run("decode error", func(t *testing.T) {
		cs, held := open(t, context.Background())
		// Not a proto message: decoding the first fails, RecvMsg's final
		// error.
		var bad struct{}
		if err := cs.RecvMsg(&bad); err == nil {
			t.Fatal("decoding into a non-message succeeded")
		}
		waitFreed(t, cs, "after RecvMsg returned its final error", held)
	})
	t.Run("read to EOF", func(t *testing.T) {
		cs, held := open(t, context.Background())
		for {
			if err := cs.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
				break
			}
		}
		waitFreed(t, cs, "after RecvMsg returned io.EOF", held)
	})
}
