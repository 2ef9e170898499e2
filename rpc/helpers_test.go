package rpc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds every wait that should end by itself: reaching it is a
// hang, reported as a failure, never a verdict on speed.
const hangGuard = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// waitUntil polls cond until it holds, failing the test at the hang guard.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %v", what, hangGuard)
		}
		time.Sleep(time.Millisecond)
	}
}

// gate implements the Test service; Block holds every call until release
// is closed or its context ends.
type gate struct {
	testpb.UnimplementedTestServer
	release  chan struct{}
	started  atomic.Int64 // Block handlers started
	canceled atomic.Int64 // Block handlers that saw their context end
	// hold, when set, keeps a handler whose context ended from returning
	// until it is closed.
	hold chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

// open lets every handler return; a test that fails midway relies on it
// to stop its server.
func (g *gate) open() {
	g.once.Do(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
		if g.hold != nil {
			select {
			case <-g.hold:
			default:
				close(g.hold)
			}
		}
	})
}

func (g *gate) Block(ctx context.Context, in *testpb.BlockRequest) (*testpb.BlockResponse, error) {
	g.started.Add(1)
	select {
	case <-g.release:
		return &testpb.BlockResponse{}, nil
	case <-ctx.Done():
		g.canceled.Add(1)
		if g.hold != nil {
			<-g.hold
		}
		return nil, ctx.Err()
	}
}

func (g *gate) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	if in.ReplySize > 0 {
		return &testpb.EchoResponse{Payload: make([]byte, in.ReplySize)}, nil
	}
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

// server is a Server under test on its own pipe namespace.
type server struct {
	srv  *rpc.Server
	tr   transport.Transport // what clients dial with
	addr string
	logs *observer.ObservedLogs
}

// startServer serves svc over lis (a listener of tr); it stops when the
// test ends.
func startServer(t *testing.T, tr transport.Transport, svc testpb.TestServer, opts ...rpc.ServerOption) *server {
	t.Helper()
	return startServerWith(t, tr, svc, nil, opts...)
}

// startServerWith is startServer with more services: register runs before
// Serve, as registration after it panics.
func startServerWith(t *testing.T, tr transport.Transport, svc testpb.TestServer, register func(*rpc.Server), opts ...rpc.ServerOption) *server {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	s := &server{srv: rpc.NewServer(append([]rpc.ServerOption{rpc.Logger(zap.New(core))}, opts...)...), tr: tr, logs: logs}
	testpb.RegisterTestServer(s.srv, svc)
	if register != nil {
		register(s.srv)
	}
	lis, err := tr.Listen("test:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(lis) }()
	t.Cleanup(func() {
		if g, ok := svc.(*gate); ok {
			g.open()
		}
		s.srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func (s *server) dial(t *testing.T, opts ...rpc.DialOption) (*rpc.ClientConn, testpb.TestClient) {
	t.Helper()
	cc, err := rpc.Dial(testCtx(t), "pipe://"+s.addr, append([]rpc.DialOption{rpc.WithTransport(s.tr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, testpb.NewTestClient(cc)
}

// spy wraps a transport to watch what its connections do.
type spy struct {
	transport.Transport
	dials atomic.Int64

	mu       sync.Mutex
	dialed   []*spyConn
	accepted []*spyConn
	// closeHook, when set, runs at the start of every Close; afterClose
	// once the connection is closed, before Close returns (as a transport
	// whose Close waits out a close grace after marking itself closed).
	closeHook  func(*spyConn)
	afterClose func(*spyConn)
	// claimLimit, when set, replaces the MAX_CONCURRENT_STREAMS of the
	// SETTINGS a dialled connection receives: a server that says more than
	// it runs, whose refusals the client must take.
	claimLimit uint32
}

func newSpy(tr transport.Transport) *spy { return &spy{Transport: tr} }

func (s *spy) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	s.dials.Add(1)
	c, err := s.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return s.wrap(c, &s.dialed), nil
}

func (s *spy) Listen(addr string) (transport.Listener, error) {
	lis, err := s.Transport.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &spyListener{Listener: lis, s: s}, nil
}

func (s *spy) wrap(c transport.Conn, list *[]*spyConn) *spyConn {
	sc := &spyConn{Conn: c, s: s}
	s.mu.Lock()
	*list = append(*list, sc)
	s.mu.Unlock()
	return sc
}

// client returns the i-th connection dialled, server the i-th accepted.
func (s *spy) client(i int) *spyConn { return s.nth(&s.dialed, i) }
func (s *spy) server(i int) *spyConn { return s.nth(&s.accepted, i) }

func (s *spy) nth(list *[]*spyConn, i int) *spyConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(*list) {
		return nil
	}
	return (*list)[i]
}

type spyListener struct {
	transport.Listener
	s *spy
}

func (l *spyListener) Accept(ctx context.Context) (transport.Conn, error) {
	c, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	sc := l.s.wrap(c, &l.s.accepted)
	sc.accepted = true
	return sc, nil
}

// spyConn counts frames by kind each way, and the bytes of send buffers
// handed out and not yet taken by SendBuffer (and of Sends in progress):
// the memory encoded messages hold above the transport.
type spyConn struct {
	transport.Conn
	s        *spy
	accepted bool // by a listener, not dialled
	sent     [16]atomic.Int64
	received [16]atomic.Int64
	held     atomic.Int64
	peak     atomic.Int64
}

func kindOf(b []byte) int {
	if len(b) < wire.HeaderLen || int(b[1]) >= 16 {
		return 0
	}
	return int(b[1])
}

func (c *spyConn) hold(n int) {
	v := c.held.Add(int64(n))
	for {
		p := c.peak.Load()
		if v <= p || c.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (c *spyConn) Send(ctx context.Context, msg []byte) error {
	c.hold(len(msg))
	defer c.hold(-len(msg))
	err := c.Conn.Send(ctx, msg)
	if err == nil {
		c.sent[kindOf(msg)].Add(1)
	}
	return err
}

func (c *spyConn) NewSendBuffer(ctx context.Context, n int) (transport.Buffer, error) {
	b, err := c.Conn.NewSendBuffer(ctx, n)
	if err == nil {
		c.hold(n)
	}
	return b, err
}

func (c *spyConn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	n := b.Len()
	defer c.hold(-n)
	k := kindOf(b.Bytes())
	err := c.Conn.SendBuffer(ctx, b)
	if err == nil {
		c.sent[k].Add(1)
	}
	return err
}

func (c *spyConn) Recv(ctx context.Context) (transport.Buffer, error) {
	b, err := c.Conn.Recv(ctx)
	if err == nil {
		k := kindOf(b.Bytes())
		c.received[k].Add(1)
		if n := c.s.claimLimit; n > 0 && !c.accepted && k == int(wire.KindSettings) {
			b.Release()
			b = transport.NewBuffer(wire.AppendSettings(nil, wire.Settings{MaxConcurrentStreams: n}), nil, 0)
		}
	}
	return b, err
}

// handshakeAsClient is a raw client's side of the SETTINGS exchange: it
// sends the client's SETTINGS and returns the server's.
func handshakeAsClient(t *testing.T, ctx context.Context, tc transport.Conn) wire.Settings {
	t.Helper()
	if err := tc.Send(ctx, wire.AppendSettings(nil, wire.Settings{})); err != nil {
		t.Fatal(err)
	}
	b, err := tc.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	f, err := wire.Decode(b.Bytes())
	if err != nil || f.Header.Kind != wire.KindSettings {
		t.Fatalf("the server's first frame: %+v, %v; want SETTINGS", f.Header, err)
	}
	return f.Settings
}

// handshakeAsServer is a raw server's side: it sends set and takes the
// client's SETTINGS.
func handshakeAsServer(t *testing.T, ctx context.Context, tc transport.Conn, set wire.Settings) error {
	if err := tc.Send(ctx, wire.AppendSettings(nil, set)); err != nil {
		return err
	}
	b, err := tc.Recv(ctx)
	if err != nil {
		return err
	}
	defer b.Release()
	if f, err := wire.Decode(b.Bytes()); err != nil || f.Header.Kind != wire.KindSettings {
		t.Errorf("the client's first frame: %+v, %v; want SETTINGS", f.Header, err)
	}
	return nil
}

func (c *spyConn) Close() error {
	c.s.mu.Lock()
	hook := c.s.closeHook
	c.s.mu.Unlock()
	if hook != nil {
		hook(c)
	}
	err := c.Conn.Close()
	c.s.mu.Lock()
	after := c.s.afterClose
	c.s.mu.Unlock()
	if after != nil {
		after(c)
	}
	return err
}

// BytesReceived passes the pipe's count on, so keepalive sees it.
func (c *spyConn) BytesReceived() uint64 {
	if a, ok := c.Conn.(transport.Activity); ok {
		return a.BytesReceived()
	}
	return 0
}

var _ = pipe.Default

// serveAndDial serves srv on a listener of tr at addr and returns a client of
// it dialed over tr with opts (a later WithTransport wins); both end with
// the test, the client first.
func serveAndDial(t *testing.T, tr transport.Transport, addr string, srv *rpc.Server, opts ...rpc.DialOption) *rpc.ClientConn {
	t.Helper()
	lis, err := tr.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	cc, err := rpc.Dial(testCtx(t), "x://"+lis.Addr().String(), append([]rpc.DialOption{rpc.WithTransport(tr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
