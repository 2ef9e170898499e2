package rpctest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport"
)

var fastKeepalive = rpc.Keepalive{Time: 200 * time.Millisecond, Timeout: 300 * time.Millisecond}

// silentPeer accepts one connection on a raw transport listener, starts
// it as a server does (the SETTINGS exchange), and then neither reads nor
// writes: a peer whose process hangs while its transport lives on. It
// returns the listener's address.
func (s *suite) silentPeer(t *testing.T) string {
	t.Helper()
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	accepted := make(chan transport.Conn, 1)
	go func() {
		c, err := lis.Accept(ctx)
		if err == nil {
			accepted <- c
			serverHandshake(ctx, c)
		}
		close(accepted)
	}()
	t.Cleanup(func() {
		cancel()
		for c := range accepted {
			c.Close()
		}
		lis.Close()
	})
	return lis.Addr().String()
}

func (s *suite) testKeepaliveDeadServer(t *testing.T) {
	addr := s.silentPeer(t)
	ctx := s.ctx(t)
	cc, err := rpc.Dial(ctx, addr, rpc.WithTransport(s.cfg.Transport), rpc.WithKeepalive(fastKeepalive))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	// No deadline: only keepalive can end this call.
	_, err = testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{})
	if ctx.Err() != nil {
		t.Fatalf("keepalive did not notice a silent server within %v", s.cfg.Timeout)
	}
	wantCode(t, "call to a silent server", err, codes.Unavailable, "keepalive")
}

func (s *suite) testKeepaliveDeadClient(t *testing.T) {
	e := s.start(t, rpc.KeepaliveParams(fastKeepalive))
	ctx := s.ctx(t)
	r := e.svc.block("dead client")
	// A raw client sends a call and then goes silent.
	tc := s.dialRaw(t, ctx, e.addr)
	sendRequest(t, ctx, tc, 1, testpb.Test_Block_FullMethodName, &testpb.BlockRequest{Tag: "dead client"})
	s.waitFor(t, "the handler to start", r.started)
	s.waitFor(t, "keepalive to cancel the silent client's call", r.ended)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want Canceled", r.err)
	}
	if _, err := s.dialEcho(ctx, e); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testGracefulStop(t *testing.T) {
	e := s.start(t)
	cc, c := s.dial(t, e)
	ctx := s.ctx(t)
	r := e.svc.block("graceful")
	call := make(chan error, 1)
	go func() { _, err := c.Block(ctx, &testpb.BlockRequest{Tag: "graceful"}); call <- err }()
	s.waitFor(t, "the handler to start", r.started)

	stopped := make(chan struct{})
	go func() {
		e.srv.GracefulStop()
		close(stopped)
	}()
	// Once the listener refuses connections, GracefulStop is under way.
	for {
		tc, err := s.cfg.Transport.Dial(ctx, e.addr)
		if err != nil {
			break
		}
		tc.Close()
		if ctx.Err() != nil {
			t.Fatal("the listener still accepts connections after GracefulStop began")
		}
	}
	// GracefulStop cannot return before the call in flight ends; the
	// call then completes normally.
	close(r.release)
	if err := <-call; err != nil {
		t.Fatalf("call in flight during GracefulStop: %v, want success", err)
	}
	s.waitFor(t, "GracefulStop to return", stopped)
	select {
	case <-r.ended:
	default:
		t.Fatal("GracefulStop returned while a call was still running")
	}
	if err := <-e.serve; err != nil {
		t.Fatalf("Serve after GracefulStop returned %v, want nil", err)
	}
	e.serve <- nil // for the cleanup's check
	// No new connections: the next call on the same ClientConn redials
	// and fails.
	_, err := c.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "call after GracefulStop", err, codes.Unavailable, "")
	_ = cc
}

// testStop: Stop fails the calls in flight with Unavailable and cancels
// their handlers' contexts; as gRPC-go's, it waits for the handlers only
// with WaitForHandlers(true).
func (s *suite) testStop(t *testing.T) {
	for _, wait := range []bool{false, true} {
		var opts []rpc.ServerOption
		tag := "stop"
		if wait {
			opts, tag = append(opts, rpc.WaitForHandlers(true)), "stop-wait"
		}
		e := s.start(t, opts...)
		_, c := s.dial(t, e)
		ctx := s.ctx(t)
		r := e.svc.block(tag)
		call := make(chan error, 1)
		go func() { _, err := c.Block(ctx, &testpb.BlockRequest{Tag: tag}); call <- err }()
		s.waitFor(t, "the handler to start", r.started)
		e.srv.Stop()
		if wait {
			select {
			case <-r.ended:
			default:
				t.Fatal("Stop with WaitForHandlers(true) returned before the handler did")
			}
		}
		wantCode(t, "call in flight at Stop", <-call, codes.Unavailable, "")
		s.waitFor(t, "the handler to end", r.ended)
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("handler context ended with %v, want Canceled", r.err)
		}
	}
}

func (s *suite) testReconnect(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	e.srv.Stop()
	_, err := c.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "call while the server is down", err, codes.Unavailable, "")

	// A new server on the same address: the same ClientConn reaches it.
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, newTestService())
	lis, err := s.cfg.Transport.Listen(e.addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", e.addr, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()
	// The failed dial started a backoff: a call that waits for ready
	// waits it out, then dials.
	if _, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte("back")}, rpc.WaitForReady(true)); err != nil {
		t.Fatalf("call after the server came back: %v", err)
	}
}

func (s *suite) testClientClose(t *testing.T) {
	e := s.start(t)
	cc, c := s.dial(t, e)
	ctx := s.ctx(t)
	cc.Close()
	_, err := c.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "call after Close", err, codes.Canceled, "closing")
	if err := cc.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// sendRequest sends a REQUEST frame by hand.
func sendRequest(t *testing.T, ctx context.Context, tc transport.Conn, id uint64, method string, req any) {
	t.Helper()
	payload, err := rpc.ProtoCodec{}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	frame := append(wire.AppendRequestHead(nil, id, 0, method, nil), payload...)
	if err := tc.Send(ctx, frame); err != nil {
		t.Fatal(err)
	}
}
