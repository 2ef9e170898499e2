package rpctest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
)

// recvFrame receives and decodes one frame on a raw connection.
func recvFrame(t *testing.T, ctx context.Context, tc transport.Conn) (wire.Frame, error) {
	t.Helper()
	b, err := tc.Recv(ctx)
	if err != nil {
		return wire.Frame{}, err
	}
	defer b.Release()
	f, err := wire.Decode(append([]byte(nil), b.Bytes()...))
	if err != nil {
		t.Fatalf("the server sent a frame that does not decode: %v", err)
	}
	return f, nil
}

// dialRaw dials addr with the suite's transport and starts the connection
// as an rdmarpc client does (the SETTINGS exchange): a raw client, for
// frames no well-behaved client sends.
func (s *suite) dialRaw(t *testing.T, ctx context.Context, addr string) transport.Conn {
	t.Helper()
	tc, err := s.cfg.Transport.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	if err := tc.Send(ctx, wire.AppendSettings(nil, wire.Settings{})); err != nil {
		t.Fatal(err)
	}
	f, err := recvFrame(t, ctx, tc)
	if err != nil || f.Header.Kind != wire.KindSettings {
		t.Fatalf("the server's first frame: %+v, %v; want SETTINGS", f.Header, err)
	}
	return tc
}

// serverHandshake is a raw server's SETTINGS exchange: it sends the
// server's and takes the client's (whatever it is).
func serverHandshake(ctx context.Context, tc transport.Conn) error {
	if err := tc.Send(ctx, wire.AppendSettings(nil, wire.Settings{})); err != nil {
		return err
	}
	b, err := tc.Recv(ctx)
	if err == nil {
		b.Release()
	}
	return err
}

// testBadFrames sends broken frames to a server over a raw connection:
// a broken request body fails only that call; a broken frame header, an
// unknown kind or a frame only servers send closes only that connection,
// after a GOAWAY saying why and one log line. The server serves on.
func (s *suite) testBadFrames(t *testing.T) {
	e := s.start(t)
	ctx := s.ctx(t)
	dialRaw := func() transport.Conn { return s.dialRaw(t, ctx, e.addr) }

	t.Run("malformed request body", func(t *testing.T) {
		tc := dialRaw()
		frame := wire.AppendRequestHead(nil, 7, 0, testpb.Test_Echo_FullMethodName, nil)
		frame = frame[:len(frame)-5] // cut into the method name
		if err := tc.Send(ctx, frame); err != nil {
			t.Fatal(err)
		}
		f, err := recvFrame(t, ctx, tc)
		if err != nil || f.Header.Kind != wire.KindResponse || f.Header.CallID != 7 ||
			codes.Code(f.Response.Code) != codes.Internal || !strings.Contains(f.Response.Message, "malformed request") {
			t.Fatalf("answer to a malformed request: %+v, %v", f, err)
		}
		// The connection serves on.
		sendRequest(t, ctx, tc, 8, testpb.Test_Echo_FullMethodName, &testpb.EchoRequest{Payload: []byte("x")})
		f, err = recvFrame(t, ctx, tc)
		if err != nil || f.Header.CallID != 8 || f.Response.Code != 0 {
			t.Fatalf("next call on the same connection: %+v, %v", f, err)
		}
	})

	header := func(version, kind, flags, reserved byte) []byte {
		h := wire.AppendHeader(nil, wire.KindCancel, 0, 1)
		h[0], h[1], h[2], h[3] = version, kind, flags, reserved
		return h
	}
	dup := append(wire.AppendRequestHead(nil, 5, 0, testpb.Test_Block_FullMethodName, nil), 0x0a, 0x01, 'd')
	// Streams whose handlers do not read, each sent a message within its
	// window, until the server holds more than its connection window (16
	// MiB) plus one message of its limit (4 MiB): only a client that
	// ignores the connection's window gets there.
	// So many that the last (or the one before) passes the bound, and
	// little is sent after it.
	var pastConn [][]byte
	payload := &testpb.EchoRequest{Payload: bytes.Repeat([]byte{'c'}, 60<<10)}
	bound := 16<<20 + wire.HeaderLen + 4<<20
	for id := uint64(1); id <= uint64(bound/len(message(1, payload))+2); id++ {
		pastConn = append(pastConn,
			wire.AppendOpen(nil, id, wire.FlagClientStreams|wire.FlagServerStreams, 0, method("Hold"), nil),
			message(id, payload))
	}
	fatal := []struct {
		name   string
		frames [][]byte
		want   string
	}{
		{"wrong version", [][]byte{header(9, 1, 0, 0)}, "unsupported frame version 9"},
		{"unknown kind", [][]byte{header(wire.Version, 42, 0, 0)}, "unknown frame kind 42"},
		{"truncated header", [][]byte{{wire.Version, 1, 0}}, "shorter than the 12-byte header"},
		{"unknown flags", [][]byte{header(wire.Version, 3, 0x80, 0)}, "unknown flags"},
		{"server-only kind", [][]byte{wire.AppendResponseHead(nil, 1, 0, "", nil, nil, nil)}, "only servers send"},
		{"duplicate call id", [][]byte{dup, dup}, "call id 5 is already in use"},
		{"bad ping", [][]byte{append(wire.AppendHeader(nil, wire.KindPing, 0, 0), 1)}, "ping body"},
		{"past the connection window", pastConn, "past the connection's window"},
		{"connection window overflow", [][]byte{wire.AppendWindow(nil, 0, wire.MaxWindowIncrement)}, "connection window updates past"},
	}
	for _, tc := range fatal {
		t.Run(tc.name, func(t *testing.T) {
			before := e.logs.FilterMessage("closing connection").Len()
			raw := dialRaw()
			for _, f := range tc.frames {
				if err := raw.Send(ctx, f); errors.Is(err, transport.ErrClosed) {
					break // the server closed it: the GOAWAY says why
				} else if err != nil {
					t.Fatal(err)
				}
			}
			// A GOAWAY that says why, then the end of the connection.
			var goaway *wire.GoAway
			for {
				f, err := recvFrame(t, ctx, raw)
				if err != nil {
					if !errors.Is(err, transport.ErrClosed) {
						t.Fatalf("connection ended with %v, want ErrClosed", err)
					}
					break
				}
				if f.Header.Kind == wire.KindGoAway {
					goaway = &f.GoAway
				}
			}
			if goaway == nil || codes.Code(goaway.Code) != codes.Internal || !strings.Contains(goaway.Message, tc.want) {
				t.Fatalf("GOAWAY %+v, want Internal naming %q", goaway, tc.want)
			}
			if n := e.logs.FilterMessage("closing connection").Len() - before; n != 1 {
				t.Fatalf("%d log lines for one bad connection, want 1", n)
			}
			if _, err := s.dialEcho(ctx, e); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// testBadResponses: a server that answers garbage fails the client's call
// with Internal; a malformed response body fails only that call, a broken
// frame the connection, and the ClientConn dials again for the next call.
func (s *suite) testBadResponses(t *testing.T) {
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := s.ctx(t)
	// The raw server answers each request with the next canned reply,
	// which it builds for the request's call id.
	replies := []func(id uint64) []byte{
		func(id uint64) []byte { // body cut short
			f := wire.AppendResponseHead(nil, id, 5, "message", nil, nil, nil)
			return f[:len(f)-3]
		},
		func(id uint64) []byte { return wire.AppendResponseHead(nil, id, 0, "", nil, nil, nil) }, // fine
		func(id uint64) []byte { return []byte{wire.Version + 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(id)} },
		func(id uint64) []byte { return wire.AppendRequestHead(nil, id, 0, "/a/b", nil) },
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for len(replies) > 0 {
			tc, err := lis.Accept(ctx)
			if err != nil {
				return
			}
			if serverHandshake(ctx, tc) != nil {
				tc.Close()
				continue
			}
			for len(replies) > 0 {
				b, err := tc.Recv(ctx)
				if err != nil {
					break
				}
				f, err := wire.Decode(b.Bytes())
				b.Release()
				if err != nil || f.Header.Kind != wire.KindRequest {
					continue // pings
				}
				reply := replies[0]
				replies = replies[1:]
				if err := tc.Send(ctx, reply(f.Header.CallID)); err != nil {
					break
				}
			}
			tc.Close()
		}
	}()
	cc, err := rpc.Dial(ctx, lis.Addr().String(), rpc.WithTransport(s.cfg.Transport))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	_, err = c.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "malformed response body", err, codes.Internal, "malformed response")
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatalf("a good response on the same connection: %v", err)
	}
	_, err = c.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "frame of another version", err, codes.Internal, "unsupported frame version")
	_, err = c.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "a request sent by the server", err, codes.Internal, "only clients send")
	cc.Close()
	lis.Close()
	<-served
}
