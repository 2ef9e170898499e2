package rpctest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
)

// waitFrame reads frames on a raw connection until one of kind for id
// comes (window updates and the like are skipped).
func waitFrame(t *testing.T, ctx context.Context, tc transport.Conn, kind wire.Kind, id uint64) wire.Frame {
	t.Helper()
	for {
		f, err := recvFrame(t, ctx, tc)
		if err != nil {
			t.Fatalf("waiting for %v on %d: %v", kind, id, err)
		}
		if f.Header.Kind == kind && f.Header.CallID == id {
			return f
		}
		if f.Header.Kind == wire.KindGoAway && f.GoAway.Code != 0 {
			t.Fatalf("waiting for %v on %d: GOAWAY %+v", kind, id, f.GoAway)
		}
	}
}

func message(id uint64, m any) []byte {
	payload, err := rpc.ProtoCodec{}.Marshal(m)
	if err != nil {
		panic(err)
	}
	return append(wire.AppendMessageHead(nil, id), payload...)
}

// testBadStreamFrames breaks each rule of streams over a raw connection:
// each is a stream error (a RESET that says why, one log line), and the
// connection serves on.
func (s *suite) testBadStreamFrames(t *testing.T) {
	e := s.start(t)
	ctx := s.ctx(t)
	open := func(id uint64, name string) []byte {
		return wire.AppendOpen(nil, id, wire.FlagClientStreams|wire.FlagServerStreams, 0, method(name), nil)
	}
	big := message(1, &testpb.EchoRequest{Payload: bytes.Repeat([]byte{'w'}, 16<<10)})
	cases := []struct {
		name   string
		frames [][]byte
		reset  uint64 // the stream the RESET names
		code   codes.Code
		want   string
		log    string
	}{
		{"message for an unknown stream", [][]byte{message(99, &testpb.EchoRequest{})}, 99, codes.Internal, "stream 99 is not open", "frame for a stream that is not open"},
		{"message after half-close", [][]byte{open(1, "Hold"), wire.AppendCloseSend(nil, 1), message(1, &testpb.EchoRequest{})}, 1, codes.Internal, "message after half-close", "resetting a stream"},
		{"second half-close", [][]byte{open(1, "Hold"), wire.AppendCloseSend(nil, 1), wire.AppendCloseSend(nil, 1)}, 1, codes.Internal, "second half-close", "resetting a stream"},
		// Hold never reads: four 16 KiB messages fill the 64 KiB window,
		// the fifth is past it.
		{"past the window", [][]byte{open(1, "Hold"), big, big, big, big, big}, 1, codes.Internal, "past the stream's window", "resetting a stream"},
		{"window update overflow", [][]byte{open(1, "Hold"), wire.AppendWindow(nil, 1, wire.MaxWindowIncrement)}, 1, codes.Internal, "window updates past", "resetting a stream"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.logs.FilterMessage(tc.log).Len()
			raw := s.dialRaw(t, ctx, e.addr)
			for _, f := range tc.frames {
				if err := raw.Send(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
			f := waitFrame(t, ctx, raw, wire.KindReset, tc.reset)
			if codes.Code(f.Reset.Code) != tc.code || !strings.Contains(f.Reset.Message, tc.want) {
				t.Fatalf("RESET %+v, want %v naming %q", f.Reset, tc.code, tc.want)
			}
			if n := e.logs.FilterMessage(tc.log).Len() - before; n != 1 {
				t.Fatalf("%d log lines %q, want 1", n, tc.log)
			}
			// The connection serves on: a unary call, and a stream.
			sendRequest(t, ctx, raw, 100, testpb.Test_Echo_FullMethodName, &testpb.EchoRequest{Payload: []byte("x")})
			if f := waitFrame(t, ctx, raw, wire.KindResponse, 100); f.Response.Code != 0 {
				t.Fatalf("unary call after the stream error: %+v", f.Response)
			}
			for _, f := range [][]byte{open(101, "Ping"), message(101, &testpb.EchoRequest{Payload: []byte("p")}), wire.AppendCloseSend(nil, 101)} {
				if err := raw.Send(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
			waitFrame(t, ctx, raw, wire.KindMessage, 101)
			if f := waitFrame(t, ctx, raw, wire.KindTrailers, 101); f.Trailers.Code != 0 {
				t.Fatalf("stream after the stream error: %+v", f.Trailers)
			}
			// A frame for the stream that just ended is a stream error: one
			// for a stream that is not open, or, when it reaches the server
			// before the handler's goroutine has let go of the stream (the
			// TRAILERS are on the wire before the server forgets the stream,
			// so that no RESET can overtake them), one after the half-close
			// the client sent. Both are true of this frame.
			if err := raw.Send(ctx, message(101, &testpb.EchoRequest{})); err != nil {
				t.Fatal(err)
			}
			if f := waitFrame(t, ctx, raw, wire.KindReset, 101); !strings.Contains(f.Reset.Message, "not open") && !strings.Contains(f.Reset.Message, "message after half-close") {
				t.Fatalf("message for an ended stream: RESET %+v", f.Reset)
			}
		})
	}

	t.Run("a burst for an ended stream", func(t *testing.T) {
		// A client streams on until it hears that the stream ended: a
		// burst of frames for it gets one RESET and one log line, and the
		// connection stays.
		before := e.logs.FilterMessage("frame for a stream that is not open").Len()
		raw := s.dialRaw(t, ctx, e.addr)
		m := message(77, &testpb.EchoRequest{Payload: []byte("late")})
		for range 3000 {
			if err := raw.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		sendRequest(t, ctx, raw, 78, testpb.Test_Echo_FullMethodName, &testpb.EchoRequest{Payload: []byte("x")})
		resets := 0
		for {
			f, err := recvFrame(t, ctx, raw)
			if err != nil {
				t.Fatalf("after the burst: %v (%d RESETs)", err, resets)
			}
			if f.Header.Kind == wire.KindReset {
				resets++
			}
			if f.Header.Kind == wire.KindResponse && f.Header.CallID == 78 {
				break
			}
		}
		if n := e.logs.FilterMessage("frame for a stream that is not open").Len() - before; n != 1 {
			t.Fatalf("%d log lines for one burst, want 1", n)
		}
		if resets > 1 {
			t.Fatalf("%d RESETs for one stream, want 1", resets)
		}
	})

	t.Run("one message past the connection's window", func(t *testing.T) {
		// Two streams whose handlers never read, on the least connection
		// window (64 KiB): the third message takes the client's
		// connection credit below zero, which a sender may do. It is
		// held, no stream is reset, and the connection serves on. (A
		// client past the window plus a message: BadFrames.)
		e := s.start(t, rpc.InitialConnWindowSize(64<<10))
		raw := s.dialRaw(t, ctx, e.addr)
		m30 := func(id uint64) []byte {
			return message(id, &testpb.EchoRequest{Payload: bytes.Repeat([]byte{'c'}, 30<<10)})
		}
		for _, f := range [][]byte{open(1, "Hold"), open(2, "Hold"), m30(1), m30(2), m30(2)} {
			if err := raw.Send(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		sendRequest(t, ctx, raw, 100, testpb.Test_Echo_FullMethodName, &testpb.EchoRequest{Payload: []byte("x")})
		for {
			f, err := recvFrame(t, ctx, raw)
			if err != nil {
				t.Fatalf("waiting for the unary response: %v", err)
			}
			if f.Header.Kind == wire.KindReset || f.Header.Kind == wire.KindGoAway {
				t.Fatalf("%v %+v %+v for a sender that kept to its credits", f.Header.Kind, f.Reset, f.GoAway)
			}
			if f.Header.Kind == wire.KindResponse && f.Header.CallID == 100 {
				if f.Response.Code != 0 {
					t.Fatalf("unary call next to the held messages: %+v", f.Response)
				}
				break
			}
		}
	})

	t.Run("a frame only servers send", func(t *testing.T) {
		// A server-only frame at the server is a connection error; the
		// server keeps serving others.
		raw := s.dialRaw(t, ctx, e.addr)
		if err := raw.Send(ctx, wire.AppendTrailers(nil, 1, 0, "", nil, nil, nil)); err != nil {
			t.Fatal(err)
		}
		f := waitFrame(t, ctx, raw, wire.KindGoAway, 0)
		if !strings.Contains(f.GoAway.Message, "only servers send") {
			t.Fatalf("GOAWAY %+v", f.GoAway)
		}
		if _, err := s.dialEcho(ctx, e); err != nil {
			t.Fatal(err)
		}
	})
}

// testStreamOnDrainingConnection: a stream opened after the server's
// graceful GOAWAY (it crossed it) is served, as a REQUEST would be, and
// GracefulStop returns once the client closes.
func (s *suite) testStreamOnDrainingConnection(t *testing.T) {
	e := s.start(t)
	ctx := s.ctx(t)
	raw := s.dialRaw(t, ctx, e.addr)
	// The server knows the connection once a frame went through it.
	sendRequest(t, ctx, raw, 1, testpb.Test_Echo_FullMethodName, &testpb.EchoRequest{})
	waitFrame(t, ctx, raw, wire.KindResponse, 1)
	stopped := make(chan struct{})
	go func() { e.srv.GracefulStop(); close(stopped) }()
	waitFrame(t, ctx, raw, wire.KindGoAway, 0)
	open := wire.AppendOpen(nil, 3, wire.FlagClientStreams|wire.FlagServerStreams, 0, method("Ping"), nil)
	for _, f := range [][]byte{open, message(3, &testpb.EchoRequest{Payload: []byte("late")}), wire.AppendCloseSend(nil, 3)} {
		if err := raw.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	waitFrame(t, ctx, raw, wire.KindMessage, 3)
	if f := waitFrame(t, ctx, raw, wire.KindTrailers, 3); f.Trailers.Code != 0 {
		t.Fatalf("stream on a draining connection: %+v", f.Trailers)
	}
	raw.Close()
	s.waitFor(t, "GracefulStop", stopped)
}
