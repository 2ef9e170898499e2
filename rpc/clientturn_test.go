package rpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// turnIs waits until cc's read turn is held by holder with waiting callers
// in line.
func turnIs(t *testing.T, cc *rpc.ClientConn, holder string, waiting int) {
	t.Helper()
	var h string
	var w int
	defer func() {
		if t.Failed() {
			t.Logf("the read turn was last seen %q with %d waiting", h, w)
		}
	}()
	waitUntil(t, "the read turn to be the "+holder+"'s", func() bool {
		h, w = rpc.ReadTurn(cc)
		return h == holder && w == waiting
	})
}

// TestCallerReadsItsResponse: a unary caller whose request has left takes
// the read turn from the reader goroutine and reads its own response: no
// goroutine hands it over. Once it returns, the turn is left idle (the
// next lone call takes it; a frame arriving wakes the reader goroutine).
// Before, the reader goroutine received every response and handed
// it to the caller (a hand-off counted here).
func TestCallerReadsItsResponse(t *testing.T) {
	g := newGate()
	s := startServer(t, pipe.New(pipe.Options{}), g)
	cc, c := s.dial(t)
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	turnIs(t, cc, "reader", 0)
	before := rpc.ResponseHandoffs(cc)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		errs <- err
	}()
	// The caller holds the turn while its handler blocks: the response
	// can only come to it.
	turnIs(t, cc, "caller", 0)
	g.open()
	if err := <-errs; err != nil {
		t.Fatalf("Block: %v", err)
	}
	if n := rpc.ResponseHandoffs(cc) - before; n != 0 {
		t.Errorf("%d responses handed to the caller by another goroutine, want 0: the caller reads its own", n)
	}
	// Nothing else in flight: the turn is left free, the reader goroutine
	// parked until a frame arrives (the pipe reports arrivals).
	turnIs(t, cc, "idle", 0)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatalf("Echo after the turn came back: %v", err)
	}
}

// TestGiveUpWithTurn: a caller that holds the read turn and gives up (its
// context canceled, or its deadline passed) while it waits in Recv passes
// the turn back to the reader goroutine; calls made meanwhile (not alone in
// flight) do not wait for the turn. No frame is lost: the other calls get
// their responses, and the late response of the call given up is dropped
// by whoever reads.
func TestGiveUpWithTurn(t *testing.T) {
	for _, c := range []struct {
		name    string
		waiters int // other calls made while the first holds the turn
		// deadline: the first call ends by a deadline, not a cancel. Its
		// states before it passes are not checked (a slow machine may pass
		// it before they are seen); it holds the turn there in all but
		// such runs.
		deadline time.Duration
	}{
		{name: "canceled", waiters: 1},
		{name: "canceled, alone"},
		{name: "canceled, two more calls", waiters: 2},
		{name: "deadline", waiters: 1, deadline: time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGate()
			s := startServer(t, pipe.New(pipe.Options{}), g)
			cc, tc := s.dial(t)
			ctx := testCtx(t)
			if _, err := tc.Echo(ctx, &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
			actx, cancel := context.WithCancel(ctx)
			want := codes.Canceled
			if c.deadline > 0 {
				actx, cancel = context.WithTimeout(ctx, c.deadline)
				want = codes.DeadlineExceeded
			}
			defer cancel()
			first := make(chan error, 1)
			go func() {
				_, err := tc.Block(actx, &testpb.BlockRequest{})
				first <- err
			}()
			if c.deadline == 0 {
				turnIs(t, cc, "caller", 0)
			}
			others := make(chan error, c.waiters)
			for range c.waiters {
				go func() {
					_, err := tc.Block(ctx, &testpb.BlockRequest{})
					others <- err
				}()
			}
			if c.deadline == 0 {
				waitUntil(t, "the handlers to start", func() bool { return g.started.Load() == int64(1+c.waiters) })
				turnIs(t, cc, "caller", 0) // the others wait for their outcome, not the turn
				cancel()
			}
			if err := <-first; status.Code(err) != want {
				t.Fatalf("the call given up: %v, want %v", err, want)
			}
			if c.deadline == 0 {
				turnIs(t, cc, "reader", 0)
			}
			g.open()
			for range c.waiters {
				if err := <-others; err != nil {
					t.Fatalf("a caller in line: %v", err)
				}
			}
			// The reader goroutine reads, or, if the other call came
			// after the first gave up (alone, so it read its own), the
			// turn is idle.
			waitUntil(t, "the read turn to be the reader's or idle", func() bool {
				h, w := rpc.ReadTurn(cc)
				return (h == "reader" || h == "idle") && w == 0
			})
			for i := range 3 {
				resp, err := tc.Echo(ctx, &testpb.EchoRequest{Payload: []byte{byte(i)}})
				if err != nil || len(resp.Payload) != 1 || resp.Payload[0] != byte(i) {
					t.Fatalf("Echo %d afterwards: %v, %v", i, resp, err)
				}
			}
		})
	}
}

// TestTurnDeliversStreams: while a unary caller holds the read turn, the
// frames of a stream reach it: the caller reads them and delivers them as
// the reader goroutine would.
func TestTurnDeliversStreams(t *testing.T) {
	g := newGate()
	srv := rpc.NewServer()
	srv.RegisterService(&benchStreams, struct{}{})
	testpb.RegisterTestServer(srv, g)
	tr := pipe.New(pipe.Options{})
	lis, err := tr.Listen("turn:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		g.open()
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	s := &server{srv: srv, tr: tr, addr: lis.Addr().String()}
	cc, c := s.dial(t)
	ctx := testCtx(t)
	st, err := cc.NewStream(ctx, &benchStreams.Streams[1], "/rdmarpc.bench.Streams/Ping")
	if err != nil {
		t.Fatal(err)
	}
	ping := func(i int) {
		t.Helper()
		if err := st.SendMsg(&testpb.EchoRequest{Payload: []byte{byte(i)}}); err != nil {
			t.Fatalf("SendMsg %d: %v", i, err)
		}
		resp := new(testpb.EchoResponse)
		if err := st.RecvMsg(resp); err != nil || len(resp.Payload) != 1 || resp.Payload[0] != byte(i) {
			t.Fatalf("RecvMsg %d: %v, %v", i, resp, err)
		}
	}
	ping(0)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil { // a call alone before
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		errs <- err
	}()
	turnIs(t, cc, "caller", 0)
	for i := 1; i <= 5; i++ {
		ping(i)
	}
	if h, _ := rpc.ReadTurn(cc); h != "caller" {
		t.Fatalf("the turn is the %s's while the call is in flight, want the caller's", h)
	}
	g.open()
	if err := <-errs; err != nil {
		t.Fatalf("Block: %v", err)
	}
	turnIs(t, cc, "reader", 0)
	ping(6)
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(new(testpb.EchoResponse)); err == nil {
		t.Fatal("RecvMsg after CloseSend: a message, want the end")
	}
}

// TestKeepaliveWhileCallerReads: keepalive's pongs reach the caller that
// holds the read turn while its handler keeps the server silent: twenty
// rounds later the connection is alive and the call succeeds.
func TestKeepaliveWhileCallerReads(t *testing.T) {
	g := newGate()
	s := startServer(t, pipe.New(pipe.Options{}), g,
		rpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Nanosecond, PermitWithoutStream: true}))
	// Timeout is a margin for a loaded machine: pongs that are never
	// read still end the call, only later.
	ka := rpc.Keepalive{Time: 20 * time.Millisecond, Timeout: 200 * time.Millisecond}
	cc, c := s.dial(t, rpc.WithKeepalive(ka))
	ctx := testCtx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		errs <- err
	}()
	turnIs(t, cc, "caller", 0)
	frames := rpc.FramesReceived(cc)
	waitUntil(t, "twenty pongs", func() bool {
		select {
		case err := <-errs:
			t.Fatalf("the call ended while the server was alive: %v", err)
		default:
		}
		return rpc.FramesReceived(cc) >= frames+20
	})
	if h, _ := rpc.ReadTurn(cc); h != "caller" {
		t.Fatalf("the turn is the %s's while the call is in flight, want the caller's", h)
	}
	g.open()
	if err := <-errs; err != nil {
		t.Fatalf("Block: %v", err)
	}
}

// TestLoneCallsLeaveReaderParked: consecutive calls alone in flight pass the
// read turn from one to the next with the reader goroutine parked (the pipe
// reports arrivals): it does not step aside from Recv for them, which is two
// goroutine wake-ups per call, and the server's reader runs each call
// without handing the reading to a worker. A frame that arrives between
// calls (the server's GOAWAY) is still read: the turn's arrival callback
// wakes the reader goroutine. Before, every lone call made the reader
// goroutine step aside, and the server handed its reading on per call.
// The pipe delivers at once, so a response can beat its caller to the turn
// (or the next request beat the server's reader to reading on) now and
// then: the counts are bounded, not zero.
func TestLoneCallsLeaveReaderParked(t *testing.T) {
	s := startServer(t, pipe.New(pipe.Options{}), newGate())
	cc, c := s.dial(t)
	ctx := testCtx(t)
	echo := func(i int) {
		t.Helper()
		resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte{byte(i)}})
		if err != nil || len(resp.Payload) != 1 || resp.Payload[0] != byte(i) {
			t.Fatalf("Echo %d: %v, %v", i, resp, err)
		}
	}
	// The first calls make the turn, and the server's reader, "alone"
	// twice over.
	for i := 0; ; i++ {
		echo(i)
		if h, _ := rpc.ReadTurn(cc); h == "idle" && i >= 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the read turn is never left idle after a lone call")
		}
	}
	asides, handed := rpc.StepAsides(cc), rpc.ReadHandoffs(s.srv)
	const calls, most = 40, 10
	for i := range calls {
		echo(i)
	}
	if n := rpc.StepAsides(cc) - asides; n > most {
		t.Errorf("the reader goroutine stepped aside %d times for %d lone calls, want at most %d", n, calls, most)
	}
	if n := rpc.ReadHandoffs(s.srv) - handed; n > most {
		t.Errorf("the server's reader handed the reading on %d times for %d lone calls, want at most %d", n, calls, most)
	}
	// A frame nobody waits for wakes the parked reader goroutine: the
	// server's GOAWAY is read, the idle link closes, and GracefulStop,
	// which waits for that, returns.
	for {
		if h, _ := rpc.ReadTurn(cc); h == "idle" {
			break
		}
		echo(0)
	}
	stopped := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("GracefulStop did not return: the client did not read the GOAWAY")
	}
}
