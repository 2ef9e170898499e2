package rpc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestStopClosesInParallel: Stop with N connections whose Close is slow
// (a peer that takes its time to let go) starts every Close before any
// ends, so it costs one close grace, not N. Each Close here waits until all
// have started (or, on failure, for a guard).
func TestStopClosesInParallel(t *testing.T) {
	const n = 5
	tr := newSpy(pipe.New(pipe.Options{}))
	var (
		started  atomic.Int64
		allIn    = make(chan struct{})
		serial   atomic.Int64 // closes that gave up waiting for the others
		markOnce sync.Once
	)
	s := startServer(t, tr, newGate())
	for range n {
		_, c := s.dial(t)
		if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	tr.mu.Lock()
	tr.closeHook = func(c *spyConn) {
		if !c.accepted {
			return
		}
		if started.Add(1) == n {
			markOnce.Do(func() { close(allIn) })
		}
		select {
		case <-allIn:
		case <-time.After(5 * time.Second):
			serial.Add(1)
		}
	}
	tr.mu.Unlock()
	s.srv.Stop()
	tr.mu.Lock()
	tr.closeHook = nil
	tr.mu.Unlock()
	if k := serial.Load(); k != 0 {
		t.Fatalf("%d of the %d server connections closed before the others had started closing: Stop closes one at a time", k, n)
	}
}

// TestRedialBackoff: while the server is gone, calls fail fast with
// Unavailable and do not each dial: the ClientConn backs off between
// attempts. (Issue 8 item 12: about 42 000 dials a second.)
func TestRedialBackoff(t *testing.T) {
	tr := newSpy(pipe.New(pipe.Options{}))
	lis, err := tr.Listen("backoff")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, newGate())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	cc, err := rpc.Dial(testCtx(t), "pipe://backoff", rpc.WithTransport(tr),
		rpc.WithConnectParams(rpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Hour, Multiplier: 1.6, MaxDelay: time.Hour}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	<-done
	dials := tr.dials.Load()
	const calls = 1000
	for i := range calls {
		_, err := c.Echo(testCtx(t), &testpb.EchoRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %d with the server gone: %v, want Unavailable", i, err)
		}
	}
	if d := tr.dials.Load() - dials; d > 1 {
		t.Fatalf("%d calls with the server gone made %d dials, want 1 (then backoff)", calls, d)
	}
}

// TestWaitForReady: a call that waits for ready rides out the backoff after
// a failed dial and reaches the server once it is back; without a server it
// waits until its own deadline.
func TestWaitForReady(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	serve := func() func() {
		lis, err := tr.Listen("wfr")
		if err != nil {
			t.Fatal(err)
		}
		srv := rpc.NewServer()
		testpb.RegisterTestServer(srv, newGate())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(lis) }()
		return func() { srv.Stop(); <-done }
	}
	stop := serve()
	fast := backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, MaxDelay: 50 * time.Millisecond}
	cc, err := rpc.Dial(testCtx(t), "pipe://wfr", rpc.WithTransport(tr), rpc.WithConnectParams(rpc.ConnectParams{Backoff: fast}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := testpb.NewTestClient(cc)
	stop()
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("call with the server gone: %v, want Unavailable", err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}, rpc.WaitForReady(true)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("waiting call with the server gone: %v, want DeadlineExceeded", err)
	}
	defer serve()()
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}, rpc.WaitForReady(true)); err != nil {
		t.Fatalf("waiting call once the server is back: %v", err)
	}
}

// fakeDialer fails every dial with err, after calling hook.
type fakeDialer struct {
	transport.Transport
	err  error
	hook func()
}

func (f fakeDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	if f.hook != nil {
		f.hook()
	}
	return nil, f.err
}

// expired is a context whose deadline has passed, but whose timer has not
// yet fired: what a dial sees when the transport's own timer, set from the
// same deadline, wins the race.
type expired struct{ context.Context }

func (expired) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDialDeadline: a dial cut short by the caller's deadline reports
// DeadlineExceeded, whatever the transport's error says. (Issue 8 item 13:
// "protocol violation: no hello from peer within 10s".)
func TestDialDeadline(t *testing.T) {
	tr := fakeDialer{err: errors.New("tcp: protocol violation: no hello from peer within 10s")}
	_, err := rpc.Dial(expired{context.Background()}, "fake://x", rpc.WithTransport(tr))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("dial past its deadline: %v, want DeadlineExceeded", err)
	}
	_, err = rpc.Dial(context.Background(), "fake://x", rpc.WithTransport(tr))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no hello") {
		t.Fatalf("dial that fails on its own: %v, want Unavailable with the transport's reason", err)
	}
}

// loggedListener records the logger Serve gives it.
type loggedListener struct {
	transport.Listener
	got atomic.Pointer[zap.Logger]
}

func (l *loggedListener) SetLogger(log *zap.Logger) { l.got.Store(log) }

// TestServeGivesListenerItsLogger: a listener that logs its refusals gets
// the server's logger, so they reach the operator's log.
func TestServeGivesListenerItsLogger(t *testing.T) {
	inner, err := pipe.New(pipe.Options{}).Listen("logged")
	if err != nil {
		t.Fatal(err)
	}
	lis := &loggedListener{Listener: inner}
	core, logs := observer.New(zap.InfoLevel)
	srv := rpc.NewServer(rpc.Logger(zap.New(core)))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	waitUntil(t, "Serve to hand the listener a logger", func() bool { return lis.got.Load() != nil })
	lis.got.Load().Warn("refused a peer")
	srv.Stop()
	<-done
	if logs.FilterMessage("refused a peer").Len() != 1 {
		t.Fatal("the listener's line did not reach the server's log")
	}
}

// TestPeerLogLinesLimited: a flood of requests for an unknown method
// writes a bounded number of log lines, not one each. (Issue 8 item 13:
// 100 000 requests wrote 10.4 MB of WARN lines in 3 s.)
func TestPeerLogLinesLimited(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	s := startServer(t, tr, newGate())
	ctx := testCtx(t)
	raw, err := tr.Dial(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	handshakeAsClient(t, ctx, raw)
	const n = 2000
	start := time.Now()
	go func() {
		for id := uint64(1); id <= n; id++ {
			if raw.Send(ctx, wire.AppendRequestHead(nil, id, 0, "/no.Such/Method", nil)) != nil {
				return
			}
		}
	}()
	for range n {
		b, err := raw.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	elapsed := time.Since(start)
	lines := s.logs.FilterMessage("unknown method").Len()
	// 20 at once, then one per 100 ms: the bound grows with the time the
	// flood took, however slow the machine.
	if bound := 20 + int(elapsed/(100*time.Millisecond)) + 1; lines > bound {
		t.Fatalf("%d unknown-method requests wrote %d log lines in %v, bound %d", n, lines, elapsed, bound)
	}
	if lines == 0 {
		t.Fatal("no log line at all")
	}
	t.Logf("%d requests, %d log lines in %v", n, lines, elapsed)
}
