package rpc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestServerSettingsFirst: the server's first frame on a connection is its
// SETTINGS, with its MaxConcurrentStreams, sent before it reads anything.
func TestServerSettingsFirst(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, newGate(), rpc.MaxConcurrentStreams(77))
	ctx := testCtx(t)
	raw, err := tr.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	f := recvFrame(t, ctx, raw) // before the client sent anything
	if f.Header.Kind != wire.KindSettings || f.Settings.MaxConcurrentStreams != 77 {
		t.Fatalf("the server's first frame: %v %+v, want SETTINGS with MAX_CONCURRENT_STREAMS 77", f.Header.Kind, f.Settings)
	}
}

// TestClientFirstFrameNotSettings: a client whose first frame is not
// SETTINGS (an older rdmarpc client's REQUEST, of wire version 2, or any
// other frame) gets a GOAWAY that says why, and its connection closes; the
// server serves others on.
func TestClientFirstFrameNotSettings(t *testing.T) {
	req := wire.AppendRequestHead(nil, 1, 0, testpb.Test_Echo_FullMethodName, nil)
	older := append([]byte{2}, req[1:]...)
	for _, c := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"version 2 client", older, "unsupported frame version 2 (this side speaks 3): upgrade the older peer"},
		{"request first", req, "the client's first frame is REQUEST, not SETTINGS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := pipe.New(pipe.Options{})
			s := startServer(t, tr, newGate())
			ctx := testCtx(t)
			raw, err := tr.Dial(ctx, s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			send(t, ctx, raw, c.frame)
			if f := recvFrame(t, ctx, raw); f.Header.Kind != wire.KindSettings {
				t.Fatalf("first frame %v, want SETTINGS", f.Header.Kind)
			}
			f := recvFrame(t, ctx, raw)
			if f.Header.Kind != wire.KindGoAway || codes.Code(f.GoAway.Code) != codes.Internal || !strings.Contains(f.GoAway.Message, c.want) {
				t.Fatalf("answer: %v %+v, want GOAWAY Internal %q", f.Header.Kind, f.GoAway, c.want)
			}
			if _, err := raw.Recv(ctx); err == nil {
				t.Fatal("the connection stays open")
			}
			_, cl := s.dial(t)
			if _, err := cl.Echo(ctx, &testpb.EchoRequest{}); err != nil {
				t.Fatalf("another client: %v", err)
			}
		})
	}
}

// TestSilentConnectionClosed: a connection whose client sends nothing, or
// stops in the middle of its SETTINGS, is closed after the connection
// timeout with one log line, instead of being held until the server's
// keepalive (two hours by default). (Issue 20 item 4.)
func TestSilentConnectionClosed(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, newGate(), rpc.ConnectionTimeout(50*time.Millisecond))
	ctx := testCtx(t)
	raw, err := tr.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if f := recvFrame(t, ctx, raw); f.Header.Kind != wire.KindSettings {
		t.Fatalf("first frame %v, want SETTINGS", f.Header.Kind)
	}
	if _, err := raw.Recv(ctx); err == nil {
		t.Fatal("the server sent a frame to a silent client")
	} else if ctx.Err() != nil {
		t.Fatal("the server kept a silent connection past the connection timeout")
	}
	waitUntil(t, "the log line", func() bool { return s.logs.FilterMessage("closing a connection that did not start").Len() == 1 })
}
