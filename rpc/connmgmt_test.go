package rpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// bothTransports runs f over the pipe and over TCP, each behind a spy that
// counts the client's dials.
func bothTransports(t *testing.T, f func(t *testing.T, tr *spy, addr string)) {
	for _, c := range []struct {
		name string
		tr   transport.Transport
		addr string
	}{
		{"pipe", pipe.New(pipe.Options{}), "mgmt:0"},
		{"tcp", tcp.New(tcp.Options{}), "127.0.0.1:0"},
	} {
		t.Run(c.name, func(t *testing.T) { f(t, newSpy(c.tr), c.addr) })
	}
}

// serveConnMgmt serves svc on addr of tr until the test ends and returns the
// address and the server's log.
func serveConnMgmt(t *testing.T, tr transport.Transport, addr string, svc testpb.TestServer, opts ...rpc.ServerOption) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	srv := rpc.NewServer(append([]rpc.ServerOption{rpc.Logger(zap.New(core))}, opts...)...)
	testpb.RegisterTestServer(srv, svc)
	lis, err := tr.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		if g, ok := svc.(*gate); ok {
			g.open()
		}
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String(), logs
}

func dialOn(t *testing.T, tr transport.Transport, addr string, opts ...rpc.DialOption) testpb.TestClient {
	t.Helper()
	cc, err := rpc.Dial(testCtx(t), "x://"+addr, append([]rpc.DialOption{rpc.WithTransport(tr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestClient(cc)
}

// pinger is a raw client connection that sends PINGs and reads what comes
// back.
type pinger struct {
	t  *testing.T
	tc transport.Conn
}

func newPinger(t *testing.T, tr transport.Transport, addr string) *pinger {
	tc, err := tr.Dial(testCtx(t), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	handshakeAsClient(t, testCtx(t), tc)
	return &pinger{t: t, tc: tc}
}

func (p *pinger) ping() {
	if err := p.tc.Send(testCtx(p.t), wire.AppendPing(nil, false, 1)); err != nil {
		p.t.Fatalf("ping: %v", err)
	}
}

// next returns the kind of the next frame and, for a GOAWAY, its body.
func (p *pinger) next() (wire.Kind, wire.GoAway) {
	b, err := p.tc.Recv(testCtx(p.t))
	if err != nil {
		p.t.Fatalf("waiting for a frame: %v", err)
	}
	defer b.Release()
	h, body, err := wire.ParseHeader(b.Bytes())
	if err != nil {
		p.t.Fatal(err)
	}
	var ga wire.GoAway
	if h.Kind == wire.KindGoAway {
		if ga, err = wire.ParseGoAway(body); err != nil {
			p.t.Fatal(err)
		}
	}
	return h.Kind, ga
}

// TestTooManyPings: a client pinging more often than the enforcement
// policy allows has two pings forgiven, then gets GOAWAY "too_many_pings"
// and its connection closed; pings within the policy are answered.
func TestTooManyPings(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr *spy, addr string) {
		for _, c := range []struct {
			name   string
			policy keepalive.EnforcementPolicy
			refuse bool
		}{
			{"too often", keepalive.EnforcementPolicy{MinTime: time.Hour, PermitWithoutStream: true}, true},
			{"without calls", keepalive.EnforcementPolicy{MinTime: time.Nanosecond}, true},
			{"within the policy", keepalive.EnforcementPolicy{MinTime: time.Nanosecond, PermitWithoutStream: true}, false},
		} {
			addr, srvLogs := serveConnMgmt(t, tr, addr, newGate(), rpc.KeepaliveEnforcementPolicy(c.policy))
			p := newPinger(t, tr, addr)
			const n = 10
			for i := range n {
				p.ping()
				kind, ga := p.next()
				if c.refuse && i == maxPingStrikes+1 {
					if kind != wire.KindGoAway || ga.Message != "too_many_pings" || codes.Code(ga.Code) != codes.Unavailable {
						t.Fatalf("%s: ping %d answered %v %+v, want GOAWAY too_many_pings", c.name, i, kind, ga)
					}
					if _, err := p.tc.Recv(testCtx(t)); err == nil {
						t.Fatalf("%s: the connection stays open after too_many_pings", c.name)
					}
					if srvLogs.FilterMessage("closing the connection of a client that pings too often").Len() != 1 {
						t.Errorf("%s: want one log line for the refusal", c.name)
					}
					break
				}
				if kind != wire.KindPong {
					t.Fatalf("%s: ping %d answered %v %+v, want a PONG", c.name, i, kind, ga)
				}
			}
		}
	})
}

// maxPingStrikes is the server's: this many early pings are forgiven.
const maxPingStrikes = 2

// TestClientBacksOffOnTooManyPings: a client told "too_many_pings" logs it
// and doubles its keepalive time, as gRPC-go's does.
func TestClientBacksOffOnTooManyPings(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	lis, err := tr.Listen("fake:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan transport.Conn, 1)
	go func() {
		c, err := lis.Accept(testCtx(t))
		if err == nil && handshakeAsServer(t, testCtx(t), c, wire.Settings{}) == nil {
			accepted <- c
		}
		close(accepted)
	}()
	core, logs := observer.New(zap.InfoLevel)
	_ = dialOn(t, tr, lis.Addr().String(), rpc.WithLogger(zap.New(core)), rpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Minute}))
	srv := <-accepted
	if srv == nil {
		t.Fatal("no connection accepted")
	}
	defer srv.Close()
	if err := srv.Send(testCtx(t), wire.AppendGoAway(nil, uint32(codes.Unavailable), "too_many_pings")); err != nil {
		t.Fatal(err)
	}
	const line = "the server says the client pings too often (too_many_pings): doubling the keepalive time"
	waitUntil(t, "the client's too_many_pings line", func() bool { return logs.FilterMessage(line).Len() > 0 })
	if got := logs.FilterMessage(line).All()[0].ContextMap()["time"]; got != 2*time.Minute {
		t.Errorf("keepalive time after too_many_pings: %v, want 2m", got)
	}
}

// TestMaxConnectionIdle: a connection without calls for MaxConnectionIdle
// gets GOAWAY and its client closes it; the next call dials again. A call
// that lasts many idle periods keeps its connection.
func TestMaxConnectionIdle(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr *spy, addr string) {
		g := newGate()
		addr, _ = serveConnMgmt(t, tr, addr, g, rpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 20 * time.Millisecond}))
		c := dialOn(t, tr, addr)
		done := make(chan error, 1)
		go func() {
			_, err := c.Block(testCtx(t), &testpb.BlockRequest{})
			done <- err
		}()
		waitUntil(t, "the call to start", func() bool { return g.started.Load() == 1 })
		// The call runs on the last connection dialled (an earlier one may
		// have gone idle first on a slow machine).
		d := tr.dials.Load()
		busy := tr.client(int(d) - 1)
		time.Sleep(100 * time.Millisecond) // five idle periods: a busy connection stays
		select {
		case <-busy.Done():
			t.Fatal("a connection with a call running was closed as idle")
		default:
		}
		g.open()
		if err := <-done; err != nil {
			t.Fatalf("a call longer than MaxConnectionIdle: %v", err)
		}
		waitUntil(t, "the idle connection to close", func() bool {
			select {
			case <-busy.Done():
				return true
			default:
				return false
			}
		})
		if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
			t.Fatalf("call after the idle GOAWAY: %v", err)
		}
		if n := tr.dials.Load(); n <= d {
			t.Fatalf("%d dials, want more than %d: the call after the GOAWAY dials again", n, d)
		}
	})
}

// TestMaxConnectionAge: at MaxConnectionAge the server sends GOAWAY, new
// calls go to a new connection, and a call still running when the grace
// ends fails with Unavailable saying so.
func TestMaxConnectionAge(t *testing.T) {
	bothTransports(t, func(t *testing.T, tr *spy, addr string) {
		g := newGate()
		addr, _ = serveConnMgmt(t, tr, addr, g, rpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 100 * time.Millisecond, MaxConnectionAgeGrace: 50 * time.Millisecond}))
		c := dialOn(t, tr, addr)
		_, err := c.Block(testCtx(t), &testpb.BlockRequest{})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "grace") {
			t.Fatalf("a call outliving the age and its grace: %v, want Unavailable", err)
		}
		g.open()
		if _, err := c.Echo(context.Background(), &testpb.EchoRequest{}); err != nil {
			t.Fatalf("call after the age limit: %v", err)
		}
		if n := tr.dials.Load(); n < 2 {
			t.Fatalf("%d dials, want a new connection after the age limit", n)
		}
	})
}
