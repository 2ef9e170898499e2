package rpc_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// background wraps a transport whose connections offer background sends
// (transport.BackgroundSender), counting frames by kind: those sent in the
// background apart from those sent with Send.
type background struct {
	transport.Transport
	dialed, accepted bgCounts
}

type bgCounts struct{ send, background [16]atomic.Int64 }

type bgConn struct {
	transport.Conn
	n *bgCounts
}

func (b *background) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := b.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return bgConn{c, &b.dialed}, nil
}

func (b *background) Listen(addr string) (transport.Listener, error) {
	lis, err := b.Transport.Listen(addr)
	if err != nil {
		return nil, err
	}
	return bgListener{lis, &b.accepted}, nil
}

type bgListener struct {
	transport.Listener
	n *bgCounts
}

func (l bgListener) Accept(ctx context.Context) (transport.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return bgConn{c, l.n}, nil
}

func (c bgConn) Send(ctx context.Context, msg []byte) error {
	err := c.Conn.Send(ctx, msg)
	if err == nil {
		c.n.send[kindOf(msg)].Add(1)
	}
	return err
}

func (c bgConn) SendBackground(ctx context.Context, msg []byte) error {
	err := c.Conn.Send(ctx, msg)
	if err == nil {
		c.n.background[kindOf(msg)].Add(1)
	}
	return err
}

// TestKeepaliveSendsInBackground: keepalive's PINGs and their PONGs go as
// background sends where the transport has them (rdma:// then does not
// rouse either end's reader to spin for a reply nobody waits on), never
// with Send.
func TestKeepaliveSendsInBackground(t *testing.T) {
	tr := &background{Transport: pipe.New(pipe.Options{})}
	s := startServer(t, tr, newGate(),
		rpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Nanosecond, PermitWithoutStream: true}))
	_, c := s.dial(t, rpc.WithKeepalive(rpc.Keepalive{Time: 10 * time.Millisecond, Timeout: time.Minute}))
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil { // connects
		t.Fatal(err)
	}
	ping, pong := int(wire.KindPing), int(wire.KindPong)
	waitUntil(t, "a keepalive round", func() bool {
		return tr.dialed.background[ping].Load()+tr.dialed.send[ping].Load() >= 1 &&
			tr.accepted.background[pong].Load()+tr.accepted.send[pong].Load() >= 1
	})
	for _, x := range []struct {
		side string
		n    *bgCounts
	}{{"client", &tr.dialed}, {"server", &tr.accepted}} {
		if p, q := x.n.send[ping].Load(), x.n.send[pong].Load(); p != 0 || q != 0 {
			t.Errorf("the %s sent %d PINGs and %d PONGs with Send, want them all in the background", x.side, p, q)
		}
	}
}

// stuckPings is a transport whose dialed connections take no keepalive
// PING: its send waits until its context ends, as over rdma:// when the
// peer returns no credit.
type stuckPings struct{ transport.Transport }

type stuckPingConn struct{ transport.Conn }

func (s stuckPings) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := s.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return stuckPingConn{c}, nil
}

func (c stuckPingConn) SendBackground(ctx context.Context, msg []byte) error {
	if kindOf(msg) == int(wire.KindPing) {
		<-ctx.Done()
		return ctx.Err()
	}
	return c.Conn.Send(ctx, msg)
}

// TestKeepaliveUnsentPing: a peer that does not take the keepalive's PING
// within Timeout is closed as keepalive's, and the calls on it say so
// (TestSharedRPC/KeepaliveDeadServer over shared receive queues got
// "took no control frame" when the silent server lent no credit for the
// PING).
func TestKeepaliveUnsentPing(t *testing.T) {
	g := newGate()
	defer g.open()
	s := startServer(t, stuckPings{pipe.New(pipe.Options{})}, g)
	_, c := s.dial(t, rpc.WithKeepalive(rpc.Keepalive{Time: 10 * time.Millisecond, Timeout: 100 * time.Millisecond}))
	_, err := c.Block(testCtx(t), &testpb.BlockRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "keepalive") {
		t.Fatalf("a call on a connection whose PING is never taken: %v, want Unavailable naming keepalive", err)
	}
}
