package rpc_test

import (
	"context"
	"strings"
	"sync"
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

// slowPings holds every keepalive PING the client sends until released,
// counting the times a send gave up on its context meanwhile.
type slowPings struct {
	transport.Transport
	release chan struct{}
	holds   int64         // PING sends held until their context ends
	pinging chan struct{} // closed at the first PING held
	once    sync.Once
	expired atomic.Int64
}

type slowPingConn struct {
	transport.Conn
	p *slowPings
}

func (s *slowPings) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := s.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return slowPingConn{c, s}, nil
}

func (c slowPingConn) SendBackground(ctx context.Context, msg []byte) error {
	if kindOf(msg) == int(wire.KindPing) && c.p.expired.Load() < c.p.holds {
		c.p.once.Do(func() { close(c.p.pinging) })
		select {
		case <-c.p.release:
		case <-ctx.Done():
			c.p.expired.Add(1)
			return ctx.Err()
		}
	}
	return c.Conn.Send(ctx, msg)
}

// TestKeepaliveSlowPingPeerSending: a PING that waits longer than Timeout to
// be sent, while the peer keeps sending (our calls' responses arrive), does
// not close the connection: the peer is alive, only slow to take what we
// send. The guest's stress test lost its connection so ("took no keepalive
// frame for 20s": the PONG waited behind megabytes of requests on a slow
// machine). Progress, not time: calls go on until the held PING's send has
// given up on its context, then some more.
func TestKeepaliveSlowPingPeerSending(t *testing.T) {
	tr := &slowPings{Transport: pipe.New(pipe.Options{}), release: make(chan struct{}), holds: 1, pinging: make(chan struct{})}
	defer close(tr.release)
	g := newGate() // Echo does not wait on it
	defer g.open()
	s := startServer(t, tr, g)
	// Timeout 1 s: keepalive closes a link silent that long after a ping, and
	// a loaded machine can stall a call for tens of milliseconds.
	_, c := s.dial(t, rpc.WithKeepalive(rpc.Keepalive{Time: 10 * time.Millisecond, Timeout: time.Second}))
	ctx := testCtx(t)
	select { // the idle connection pings
	case <-tr.pinging:
	case <-ctx.Done():
		t.Fatal("no PING")
	}
	for calls := 0; tr.expired.Load() < tr.holds || calls < 100; calls++ {
		if _, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte("alive")}); err != nil {
			t.Fatalf("call %d, the PING's send given up %d times: %v", calls, tr.expired.Load(), err)
		}
	}
}
