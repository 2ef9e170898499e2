package rpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/resolver/manual"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestIdleTimeout: a ClientConn with an idle timeout stays connected while
// a call or a stream is in progress, however often the monitor looks, goes
// Idle (resolver and connection closed) once none is, and starts again at
// the next call.
func TestIdleTimeout(t *testing.T) {
	tr := newSpy(pipe.New(pipe.Options{}))
	g := newGate()
	s := startServer(t, tr, g)
	hs := newHealthServer()
	b := &backend{}
	hname := startHealthServer(t, tr, b, hs)
	r := manual.NewBuilderWithScheme("idle")
	var builds, closes atomic.Int64
	r.BuildCallback = func(resolver.Target, resolver.ClientConn, resolver.BuildOptions) { builds.Add(1) }
	r.CloseCallback = func() { closes.Add(1) }
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: s.addr}, {Addr: hname}}})
	cc, c := newClient(t, tr, r, rpc.WithIdleTimeout(time.Millisecond))
	ctx := testCtx(t)

	busy := func(what string) {
		t.Helper()
		n := rpc.IdleChecks(cc)
		waitUntil(t, "the idle monitor to look", func() bool { return rpc.IdleChecks(cc) >= n+3 })
		if st := cc.GetState(); st != connectivity.Ready || closes.Load() != 0 {
			t.Fatalf("with %s in progress: %v, resolver closed %d times; want READY, 0", what, st, closes.Load())
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Block(ctx, &testpb.BlockRequest{})
		done <- err
	}()
	waitUntil(t, "the call to start", func() bool { return g.started.Load() == 1 })
	busy("a call")
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitForState(t, cc, connectivity.Idle)
	// The state says Idle first, then the resolver is closed.
	waitUntil(t, "the resolver to close", func() bool { return closes.Load() == 1 })
	select {
	case <-tr.client(0).Done():
	case <-ctx.Done():
		t.Fatal("idle, and the connection is still open")
	}

	// The next call starts again; pick_first takes the first address.
	if _, err := echo(ctx, c); err != nil {
		t.Fatalf("call after idle: %v", err)
	}
	if builds.Load() != 2 || tr.dials.Load() != 2 {
		t.Fatalf("after idle: %d builds, %d dials, want 2 and 2", builds.Load(), tr.dials.Load())
	}

	// A stream (the health server's Watch, on the second address, which
	// the resolver gives when built again) counts until it ends.
	waitForState(t, cc, connectivity.Idle)
	waitUntil(t, "the resolver to close", func() bool { return closes.Load() == 2 })
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: hname}}})
	closes.Store(0)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(sctx, &rpc.StreamDesc{ServerStreams: true}, "/grpc.health.v1.Health/Watch", rpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&wrapperspb.StringValue{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.Int32Value)); err != nil {
		t.Fatal(err)
	}
	busy("a stream")
	cancel()
	waitForState(t, cc, connectivity.Idle)
}
