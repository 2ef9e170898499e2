package rpc_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// breakable stands for the RDMA transport: a pipe transport whose connections
// the test breaks (as a port going down breaks queue pairs) and whose
// dials then fail until it heals. It counts the messages its connections
// send.
type breakable struct {
	transport.Transport
	sent  atomic.Int64
	dials atomic.Int64

	mu    sync.Mutex
	down  error
	conns []transport.Conn
}

func (f *breakable) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	f.dials.Add(1)
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down != nil {
		return nil, down
	}
	c, err := f.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	return &sendCounter{Conn: c, n: &f.sent}, nil
}

// fail closes every connection and makes dials fail with err.
func (f *breakable) fail(err error) {
	f.mu.Lock()
	f.down = err
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

func (f *breakable) heal() {
	f.mu.Lock()
	f.down = nil
	f.mu.Unlock()
}

// fallbackTr stands for TCP, the fallback: the same pipe namespace, its own
// count of messages sent and of connections, open and closed.
type fallbackTr struct {
	transport.Transport
	sent     atomic.Int64
	attempts atomic.Int64
	down     atomic.Bool // dials fail
	mu       sync.Mutex
	conns    []transport.Conn
}

func (c *fallbackTr) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c.attempts.Add(1)
	if c.down.Load() {
		return nil, errors.New("fallback refused")
	}
	tc, err := c.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.conns = append(c.conns, tc)
	c.mu.Unlock()
	return &sendCounter{Conn: tc, n: &c.sent}, nil
}

// open is the number of its connections not closed.
func (c *fallbackTr) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, tc := range c.conns {
		select {
		case <-tc.Done():
		default:
			n++
		}
	}
	return n
}

func (c *fallbackTr) dialed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

type sendCounter struct {
	transport.Conn
	n *atomic.Int64
}

func (c *sendCounter) Send(ctx context.Context, msg []byte) error {
	c.n.Add(1)
	return c.Conn.Send(ctx, msg)
}

func (c *sendCounter) SendBuffer(ctx context.Context, b transport.Buffer) error {
	c.n.Add(1)
	return c.Conn.SendBuffer(ctx, b)
}

// failoverSetup serves a gate on a pipe namespace reached by two
// transports: primary (the target's own, the client's WithTransport) and
// a fallback registered under scheme.
func failoverSetup(t *testing.T, scheme string, opts ...rpc.DialOption) (*breakable, *fallbackTr, *gate, testpb.TestClient, *observer.ObservedLogs) {
	t.Helper()
	p := pipe.New(pipe.Options{})
	primary := &breakable{Transport: p}
	fb := &fallbackTr{Transport: p}
	transport.Register(scheme, fb)
	g := newGate()
	srv := startServer(t, p, g)
	core, logs := observer.New(zap.InfoLevel)
	fast := backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}
	cc, err := rpc.Dial(testCtx(t), "pipe://"+srv.addr, append([]rpc.DialOption{
		rpc.WithTransport(primary), rpc.WithFallback(scheme), rpc.WithLogger(zap.New(core)),
		rpc.WithConnectParams(rpc.ConnectParams{Backoff: fast}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return primary, fb, g, testpb.NewTestClient(cc), logs
}

// TestFailoverAndSwitchBack: a connection over the target's own transport
// that fails while it takes calls is replaced at once by one over the
// fallback: the call in flight fails Unavailable (it has no retry policy),
// every later call succeeds (none waits for ready, so a backend in
// TransientFailure would fail them), while the own transport is probed;
// once it heals new calls go over it again and the fallback connection
// closes. One log line each way.
func TestFailoverAndSwitchBack(t *testing.T) {
	primary, fb, g, c, logs := failoverSetup(t, "failover-test-a")
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if primary.sent.Load() == 0 || fb.dialed() != 0 {
		t.Fatalf("before the failure: %d messages over the own transport, %d fallback dials; want >0, 0", primary.sent.Load(), fb.dialed())
	}

	inFlight := make(chan error, 1)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		inFlight <- err
	}()
	waitUntil(t, "the call in flight to reach the server", func() bool { return g.started.Load() == 1 })
	primary.fail(errors.New("port down: queue pair in error"))
	if err := <-inFlight; status.Code(err) != codes.Unavailable {
		t.Fatalf("call in flight when the connection failed: %v, want Unavailable", err)
	}

	for i := range 20 {
		if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatalf("call %d after the failure: %v", i, err)
		}
	}
	if fb.sent.Load() == 0 || fb.dialed() != 1 {
		t.Fatalf("after the failure: %d messages over the fallback, %d fallback dials; want >0, 1", fb.sent.Load(), fb.dialed())
	}
	probes := primary.dials.Load()
	waitUntil(t, "the own transport to be probed while it is down", func() bool { return primary.dials.Load() > probes })

	primary.heal()
	before := primary.sent.Load()
	for primary.sent.Load() == before {
		if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatalf("call while switching back: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("no call went over the healed own transport")
		}
	}
	waitUntil(t, "the fallback connection to drain and close", func() bool { return fb.open() == 0 })
	onFallback := fb.sent.Load()
	for i := range 10 {
		if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatalf("call %d after switching back: %v", i, err)
		}
	}
	if n := fb.sent.Load(); n != onFallback {
		t.Fatalf("%d messages over the fallback after switching back", n-onFallback)
	}
	if n := logs.FilterMessageSnippet("reconnecting over the fallback").Len(); n != 1 {
		t.Errorf("%d failover log lines, want 1", n)
	}
	if n := logs.FilterMessageSnippet("works again").Len(); n != 1 {
		t.Errorf("%d switch-back log lines, want 1", n)
	}
}

// TestFailoverRetriesInFlight: with a retry policy, the call in flight
// when the connection fails is retried over the fallback and succeeds.
func TestFailoverRetriesInFlight(t *testing.T) {
	const sc = `{"methodConfig":[{"name":[{"service":"rdmarpc.test.v1.Test"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	primary, fb, g, c, _ := failoverSetup(t, "failover-test-b", rpc.WithDefaultServiceConfig(sc))
	ctx := testCtx(t)
	inFlight := make(chan error, 1)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		inFlight <- err
	}()
	waitUntil(t, "the call to reach the server", func() bool { return g.started.Load() == 1 })
	primary.fail(errors.New("retry exceeded"))
	waitUntil(t, "the call to be retried", func() bool { return g.started.Load() == 2 })
	g.open()
	if err := <-inFlight; err != nil {
		t.Fatalf("call in flight when the connection failed, with a retry policy: %v", err)
	}
	if fb.dialed() != 1 {
		t.Fatalf("%d fallback dials, want 1", fb.dialed())
	}
}

// TestNoFailoverOnGoAway: a server that closes the connection on purpose
// (GOAWAY, here a graceful stop) is no failure: the client does not move
// to the fallback.
func TestNoFailoverWithoutFailure(t *testing.T) {
	p := pipe.New(pipe.Options{})
	primary := &breakable{Transport: p}
	fb := &fallbackTr{Transport: p}
	transport.Register("failover-test-c", fb)
	g := newGate()
	srv := startServer(t, p, g)
	cc, err := rpc.Dial(testCtx(t), "pipe://"+srv.addr, rpc.WithTransport(primary), rpc.WithFallback("failover-test-c"),
		rpc.WithConnectParams(rpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	srv.srv.GracefulStop()
	// The client's link goes, on purpose; a server on a new name is not
	// needed: what matters is that no fallback dial happened.
	waitUntil(t, "the client to drop its connection", func() bool {
		primary.mu.Lock()
		defer primary.mu.Unlock()
		for _, tc := range primary.conns {
			select {
			case <-tc.Done():
			default:
				return false
			}
		}
		return true
	})
	if n := fb.dialed(); n != 0 {
		t.Fatalf("%d fallback dials after a graceful stop, want 0", n)
	}
}

// TestFailoverBothDown: when the fallback cannot connect either, the
// backend goes on trying, the target's own transport first at each
// attempt, so it comes back over it when it heals (no fallback link to
// probe from).
func TestFailoverBothDown(t *testing.T) {
	primary, fb, _, c, _ := failoverSetup(t, "failover-test-d")
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	fb.down.Store(true)
	primary.fail(errors.New("port down"))
	dials := primary.dials.Load()
	waitUntil(t, "a fallback attempt, then one over the own transport", func() bool {
		return fb.attempts.Load() > 0 && primary.dials.Load() > dials
	})
	primary.heal()
	sent := primary.sent.Load()
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}, rpc.WaitForReady(true)); err != nil {
		t.Fatalf("call once the own transport healed: %v", err)
	}
	if primary.sent.Load() == sent || fb.dialed() != 0 {
		t.Fatalf("the call went %d messages over the own transport, %d fallback connections; want >0, 0", primary.sent.Load()-sent, fb.dialed())
	}
}

// TestFailoverFallbackLinkReplaced: the fallback connection breaks too
// while the own transport is down; the backend connects over the fallback
// again, and the probe goes on from the new connection, so calls move back
// once the own transport heals.
func TestFailoverFallbackLinkReplaced(t *testing.T) {
	primary, fb, _, c, logs := failoverSetup(t, "failover-test-e")
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	primary.fail(errors.New("port down"))
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}, rpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	fb.mu.Lock()
	for _, tc := range fb.conns {
		tc.Close()
	}
	fb.mu.Unlock()
	waitUntil(t, "a second fallback connection", func() bool {
		_, err := c.Echo(ctx, &testpb.EchoRequest{}, rpc.WaitForReady(true))
		return err == nil && fb.dialed() == 2
	})
	primary.heal()
	waitUntil(t, "the switch back", func() bool { return logs.FilterMessageSnippet("works again").Len() == 1 })
	sent := primary.sent.Load()
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil || primary.sent.Load() == sent {
		t.Fatalf("call after the switch back: %v, %d messages over the own transport", err, primary.sent.Load()-sent)
	}
}
