package rpc_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestWorkersBusy: handlers that block hold every worker, and more calls
// still run (on goroutines of their own) and the link keeps reading; with
// no workers at all, calls run as before. goleak (TestMain) checks that the
// workers end with Stop.
func TestWorkersBusy(t *testing.T) {
	for _, n := range []uint32{0, 1, 2} {
		t.Run(fmt.Sprintf("workers=%d", n), func(t *testing.T) {
			g := newGate()
			s := startServer(t, pipe.New(pipe.Options{}), g, rpc.NumStreamWorkers(n))
			_, c := s.dial(t)
			ctx := testCtx(t)
			const blocked = 4 // more than the workers
			errs := make(chan error, blocked)
			for range blocked {
				go func() {
					_, err := c.Block(ctx, &testpb.BlockRequest{})
					errs <- err
				}()
			}
			waitUntil(t, "the blocking handlers to start", func() bool { return g.started.Load() == blocked })
			for i := range 10 {
				resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte{byte(i)}})
				if err != nil || len(resp.Payload) != 1 || resp.Payload[0] != byte(i) {
					t.Fatalf("Echo %d while every worker blocks: %v, %v", i, resp, err)
				}
			}
			g.open()
			for range blocked {
				if err := <-errs; err != nil {
					t.Errorf("Block: %v", err)
				}
			}
		})
	}
}

// TestCallContext: a unary handler's context ends with its deadline (as
// DeadlineExceeded), with the client's cancel (Canceled), and with the
// server's Stop; context.Cause agrees with Err; contexts derived from it
// (WithCancel, AfterFunc) end with it.
func TestCallContextEnds(t *testing.T) {
	type seen = probeSeen
	run := func(t *testing.T, opts []rpc.ServerOption, call func(testpb.TestClient, *gate) error, end func(*server, *gate)) (seen, error) {
		g := newGate()
		g.hold = make(chan struct{})
		got := make(chan seen, 1)
		h := &ctxProbe{gate: g, got: got}
		s := startServer(t, pipe.New(pipe.Options{}), h, opts...)
		_, c := s.dial(t)
		errc := make(chan error, 1)
		go func() { errc <- call(c, g) }()
		waitUntil(t, "the handler to start", func() bool { return g.started.Load() == 1 })
		if end != nil {
			end(s, g)
		}
		r := <-got
		close(g.hold)
		return r, <-errc
	}
	t.Run("deadline", func(t *testing.T) {
		r, err := run(t, nil, func(c testpb.TestClient, _ *gate) error {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := c.Block(ctx, &testpb.BlockRequest{})
			return err
		}, nil)
		if r.err != context.DeadlineExceeded || r.cause != context.DeadlineExceeded || r.child != context.DeadlineExceeded || !r.after || !r.deadline {
			t.Errorf("handler saw %+v", r)
		}
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("client: %v", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		r, err := run(t, nil, func(c testpb.TestClient, g *gate) error {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				waitUntil(t, "the handler to start", func() bool { return g.started.Load() == 1 })
				cancel()
			}()
			_, err := c.Block(ctx, &testpb.BlockRequest{})
			return err
		}, nil)
		if r.err != context.Canceled || r.cause != context.Canceled || r.child != context.Canceled || !r.after || r.deadline {
			t.Errorf("handler saw %+v", r)
		}
		if status.Code(err) != codes.Canceled {
			t.Errorf("client: %v", err)
		}
	})
	t.Run("stop", func(t *testing.T) {
		r, err := run(t, nil, func(c testpb.TestClient, _ *gate) error {
			_, err := c.Block(context.Background(), &testpb.BlockRequest{})
			return err
		}, func(s *server, g *gate) {
			go s.srv.Stop()
		})
		if r.err != context.Canceled || r.cause != context.Canceled || r.child != context.Canceled || !r.after {
			t.Errorf("handler saw %+v", r)
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("client: %v", err)
		}
	})
}

// ctxProbe's Block reports what its context says once it ends.
type ctxProbe struct {
	*gate
	got chan<- probeSeen
}

// probeSeen is what ctxProbe's handler saw.
type probeSeen struct {
	err, cause, child error // ctx.Err(), context.Cause(ctx), a WithCancel child's Err
	after             bool  // a context.AfterFunc ran
	deadline          bool  // ctx.Deadline's ok
}

func (p *ctxProbe) Block(ctx context.Context, _ *testpb.BlockRequest) (*testpb.BlockResponse, error) {
	child, stop := context.WithCancel(ctx)
	defer stop()
	after := make(chan struct{})
	context.AfterFunc(ctx, func() { close(after) })
	p.started.Add(1)
	<-ctx.Done()
	<-child.Done()
	<-after
	_, hasDeadline := ctx.Deadline()
	p.got <- probeSeen{ctx.Err(), context.Cause(ctx), child.Err(), true, hasDeadline}
	<-p.hold
	// The context's error, as a handler would: the response may reach
	// the client before its own deadline's timer fires on a loaded
	// machine (the server's deadline is the client's plus the trip), and
	// then it is what the client reports.
	return nil, ctx.Err()
}

// inlineProbe's Block records whether it runs on the goroutine that read
// its request (readTurn on its stack) before it waits at the gate.
type inlineProbe struct {
	*gate
	inline chan bool
}

func (p *inlineProbe) Block(ctx context.Context, in *testpb.BlockRequest) (*testpb.BlockResponse, error) {
	buf := make([]byte, 64<<10)
	p.inline <- strings.Contains(string(buf[:runtime.Stack(buf, false)]), "readTurn")
	return p.gate.Block(ctx, in)
}

// TestInlineCallHandsOffReading: with a worker idle, a unary call runs on
// the goroutine that read it, which first hands the reading to the
// worker; while that handler blocks, the connection keeps reading (more
// calls, which run elsewhere). Before the hand-off every call ran on a worker, woken
// by the reader.
func TestInlineCallHandsOffReading(t *testing.T) {
	g := newGate()
	p := &inlineProbe{gate: g, inline: make(chan bool, 16)}
	s := startServer(t, pipe.New(pipe.Options{}), p, rpc.NumStreamWorkers(2))
	_, c := s.dial(t)
	ctx := testCtx(t)
	// The first call starts a worker, which is idle once it is done.
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a worker to be idle", func() bool { return rpc.IdleWorkers(s.srv) == 1 })
	errs := make(chan error, 2)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		errs <- err
	}()
	if !<-p.inline {
		t.Fatal("with a worker idle, the call did not run on the goroutine that read it")
	}
	// The handler holds the goroutine that read it; the worker reads on.
	for i := range 5 {
		resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte{byte(i)}})
		if err != nil || len(resp.Payload) != 1 || resp.Payload[0] != byte(i) {
			t.Fatalf("Echo %d while a handler holds the first reader: %v, %v", i, resp, err)
		}
	}
	// Another handler that blocks, wherever it runs: both started
	// workers may be taken now, and the connection still reads.
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		errs <- err
	}()
	<-p.inline
	waitUntil(t, "both handlers to start", func() bool { return g.started.Load() == 2 })
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatalf("Echo while both handlers block: %v", err)
	}
	g.open()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Block: %v", err)
		}
	}
}
