package rpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// stubborn is a raw client that ignores GOAWAY: it never closes its
// connection, and answers PINGs only when pong says so. It reports each
// frame kind it reads on kinds, and its connection's end on gone.
func stubborn(t *testing.T, ctx context.Context, tc transport.Conn, pong bool) (kinds <-chan wire.Kind, gone <-chan struct{}) {
	k := make(chan wire.Kind, 64)
	g := make(chan struct{})
	go func() {
		defer close(g)
		for {
			b, err := tc.Recv(ctx)
			if err != nil {
				return
			}
			h, _, err := wire.ParseHeader(b.Bytes())
			b.Release()
			if err != nil {
				return
			}
			select {
			case k <- h.Kind:
			default:
			}
			if h.Kind == wire.KindPing && pong {
				if tc.Send(ctx, wire.AppendPing(nil, true, 0)) != nil {
					return
				}
			}
		}
	}()
	return k, g
}

// TestGracefulStopClosesStubbornClient: GracefulStop sends GOAWAY and lets
// the call in flight finish; a client that never closes its connection
// after it no longer holds GracefulStop (it did until Stop): once the PING
// after the GOAWAY is answered and no call is left, the server closes the
// connection itself. (Issue 20 item 4.)
func TestGracefulStopClosesStubbornClient(t *testing.T) {
	for _, pong := range []bool{true, false} {
		name := map[bool]string{true: "answers pings", false: "answers nothing"}[pong]
		t.Run(name, func(t *testing.T) {
			g := newGate()
			tr := pipe.New(pipe.Options{})
			ka := rpc.Keepalive{Time: time.Hour, Timeout: 100 * time.Millisecond}
			s := startServer(t, tr, g, rpc.KeepaliveParams(ka))
			ctx := testCtx(t)
			raw, err := tr.Dial(ctx, s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			handshakeAsClient(t, ctx, raw)
			send(t, ctx, raw, wire.AppendRequestHead(nil, 1, 0, testpb.Test_Block_FullMethodName, nil))
			waitUntil(t, "the call to run", func() bool { return g.started.Load() == 1 })
			kinds, gone := stubborn(t, ctx, raw, pong)

			stopped := make(chan struct{})
			go func() { s.srv.GracefulStop(); close(stopped) }()
			for k := range kinds {
				if k == wire.KindGoAway {
					break
				}
			}
			select {
			case <-stopped:
				t.Fatal("GracefulStop returned with a call running")
			case <-gone:
				t.Fatal("the server closed the connection with a call running")
			default:
			}
			g.open() // the call ends; its RESPONSE goes
			select {
			case <-stopped:
			case <-ctx.Done():
				t.Fatal("GracefulStop still waits for a client that does not close its connection")
			}
			<-gone
		})
	}
}

// TestMaxConnectionIdleClosesStubbornClient: the GOAWAY of
// MaxConnectionIdle is followed by the server's own close, whether or not
// the client closes (it did not close a client that ignored it).
func TestMaxConnectionIdleClosesStubbornClient(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, newGate(), rpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionIdle: 20 * time.Millisecond, Time: time.Hour, Timeout: 100 * time.Millisecond}))
	ctx := testCtx(t)
	raw, err := tr.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handshakeAsClient(t, ctx, raw)
	kinds, gone := stubborn(t, ctx, raw, false)
	for k := range kinds {
		if k == wire.KindGoAway {
			break
		}
	}
	select {
	case <-gone:
	case <-ctx.Done():
		t.Fatal("the server keeps a connection after its idle GOAWAY")
	}
}

// TestGracefulStopKeepsAnsweringCall: a unary call that ends on a
// draining connection whose PING came back is sent its response before
// the server closes the connection. It was closed under it: the call left
// the calls before its response counted as sending, and a PONG (or the
// response of another call) in between found nothing left (CI saw the
// conformance GracefulStop call fail "connection closed by peer").
func TestGracefulStopKeepsAnsweringCall(t *testing.T) {
	g := newGate()
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, g, rpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Hour, Timeout: time.Hour}))
	ctx := testCtx(t)
	raw, err := tr.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handshakeAsClient(t, ctx, raw)
	send(t, ctx, raw, wire.AppendRequestHead(nil, 1, 0, testpb.Test_Block_FullMethodName, nil))
	waitUntil(t, "the call to run", func() bool { return g.started.Load() == 1 })
	kinds, gone := stubborn(t, ctx, raw, true)
	closable := make(chan bool, 1)
	rpc.SetUnaryEndedHook(t, func(c bool) {
		select {
		case closable <- c:
		default:
		}
	})
	stopped := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(stopped) }()
	waitUntil(t, "the PING after the GOAWAY to come back", func() bool { return rpc.Settled(s.srv) })
	g.open()
	if <-closable {
		t.Fatal("a draining connection could be closed while a call's response was still to be sent")
	}
	select {
	case <-gone:
	case <-ctx.Done():
		t.Fatal("the server keeps the drained connection")
	}
	for got := false; !got; {
		select {
		case k := <-kinds:
			got = k == wire.KindResponse
		default:
			t.Fatal("the connection closed before the call's response reached the client")
		}
	}
	<-stopped
}
