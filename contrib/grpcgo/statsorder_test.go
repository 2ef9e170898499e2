package grpcgo_test

// The same calls, the same service code, made once with gRPC-go's client
// and server and once with rdmarpc's (gRPC-go's stubs through this
// package): each side's stats events must come in the same order.

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	gstats "google.golang.org/grpc/stats"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/stats"
)

// events records the stats events of each side in order, by type name
// (both packages name them alike: "*stats.Begin").
type events struct {
	mu             sync.Mutex
	client, server []string
}

func (e *events) add(client bool, s any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	name := strings.TrimPrefix(fmt.Sprintf("%T", s), "*stats.")
	if client {
		e.client = append(e.client, name)
	} else {
		e.server = append(e.server, name)
	}
}

// settle waits until both sides reported the End of the call in progress
// (the server's may come after the client's; the test's timeout bounds
// the wait), and takes the events.
func (e *events) settle() (client, server []string) {
	for {
		e.mu.Lock()
		done := slices.Contains(e.client, "End") && slices.Contains(e.server, "End")
		e.mu.Unlock()
		if done {
			return e.take()
		}
		time.Sleep(time.Millisecond)
	}
}

func (e *events) take() (client, server []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	client, server = e.client, e.server
	e.client, e.server = nil, nil
	return client, server
}

// gEvents is events as gRPC-go's stats.Handler.
type gEvents struct{ *events }

func (gEvents) TagRPC(ctx context.Context, _ *gstats.RPCTagInfo) context.Context   { return ctx }
func (e gEvents) HandleRPC(_ context.Context, s gstats.RPCStats)                   { e.add(s.IsClient(), s) }
func (gEvents) TagConn(ctx context.Context, _ *gstats.ConnTagInfo) context.Context { return ctx }
func (gEvents) HandleConn(context.Context, gstats.ConnStats)                       {}

// rEvents is events as rdmarpc's stats.Handler.
type rEvents struct{ *events }

func (rEvents) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (e rEvents) HandleRPC(_ context.Context, s stats.RPCStats)                   { e.add(s.IsClient(), s) }
func (rEvents) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (rEvents) HandleConn(context.Context, stats.ConnStats)                       {}

// allKinds is gRPC-go's interop TestService with one method of each kind.
type allKinds struct {
	testgrpc.UnimplementedTestServiceServer
}

func (allKinds) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

func (allKinds) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	for range 2 {
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

func (allKinds) StreamingInputCall(s grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	for {
		if _, err := s.Recv(); err == io.EOF {
			return s.SendAndClose(&testgrpc.StreamingInputCallResponse{})
		} else if err != nil {
			return err
		}
	}
}

func (allKinds) FullDuplexCall(s grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	for {
		if _, err := s.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// callEach makes one call of each kind; the stream calls do one step at a
// time (send, then receive) so that each side's order is fixed.
func callEach(t *testing.T, c testgrpc.TestServiceClient, ev *events) map[string][2][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][2][]string{}
	settle := func(name string) {
		cl, sv := ev.settle()
		out[name] = [2][]string{cl, sv}
	}
	if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	settle("unary")
	ss, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := ss.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	settle("server streaming")
	cs, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := cs.Send(&testgrpc.StreamingInputCallRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	settle("client streaming")
	bs, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := bs.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := bs.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := bs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Recv(); err != io.EOF {
		t.Fatalf("bidi: %v, want EOF", err)
	}
	settle("bidi streaming")
	return out
}

// TestStatsOrder: for each kind of RPC, the client's and the server's stats
// events come in gRPC-go's order (issue 22 item 4: the server reported
// Begin before InHeader, and a client-streaming client could report End
// before the response's InPayload).
func TestStatsOrder(t *testing.T) {
	// gRPC-go.
	gev := &events{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.StatsHandler(gEvents{gev}))
	testgrpc.RegisterTestServiceServer(gs, allKinds{})
	go gs.Serve(lis)
	defer gs.Stop()
	gcc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(gEvents{gev}))
	if err != nil {
		t.Fatal(err)
	}
	defer gcc.Close()
	gc := testgrpc.NewTestServiceClient(gcc)
	if _, err := gc.EmptyCall(context.Background(), &testgrpc.Empty{}); err == nil {
		t.Fatal("EmptyCall is not implemented, yet it succeeded")
	}
	gev.settle() // the first call connects: its delayed pick is another test
	want := callEach(t, gc, gev)

	// rdmarpc.
	rev := &events{}
	rl, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := rpc.NewServer(rpc.StatsHandler(rEvents{rev}))
	testgrpc.RegisterTestServiceServer(grpcgo.NewServer(rs), allKinds{})
	served := make(chan error, 1)
	go func() { served <- rs.Serve(rl) }()
	defer func() { rs.Stop(); <-served }()
	rcc, err := rpc.NewClient("tcp://"+rl.Addr().String(), rpc.WithStatsHandler(rEvents{rev}))
	if err != nil {
		t.Fatal(err)
	}
	defer rcc.Close()
	rc := testgrpc.NewTestServiceClient(grpcgo.NewClient(rcc))
	if _, err := rc.EmptyCall(context.Background(), &testgrpc.Empty{}); err == nil {
		t.Fatal("EmptyCall is not implemented, yet it succeeded")
	}
	rev.settle()
	got := callEach(t, rc, rev)

	for _, kind := range []string{"unary", "server streaming", "client streaming", "bidi streaming"} {
		// The server's events come from the handler's goroutine, in
		// one order.
		if g, w := got[kind][1], want[kind][1]; !slices.Equal(g, w) {
			t.Errorf("%s, server: events\n  %v\nwant gRPC-go's\n  %v", kind, g, w)
		}
		// The client's come from the caller's goroutine and from the
		// connection's reader (gRPC-go reports InHeader and InTrailer as
		// they arrive), so how the two directions interleave, and where
		// InTrailer falls among the InPayloads, depend on timing in
		// gRPC-go. Compare Begin first and End last, each direction's
		// events in order, and InTrailer once, after InHeader.
		for _, ev := range [][]string{got[kind][0], want[kind][0]} {
			i := slices.Index(ev, "InTrailer")
			if len(ev) < 2 || ev[0] != "Begin" || ev[len(ev)-1] != "End" || i < 0 || slices.Index(ev[i+1:], "InTrailer") >= 0 || i < slices.Index(ev, "InHeader") {
				t.Errorf("%s, client: events %v: want Begin first, End last, one InTrailer after InHeader", kind, ev)
			}
		}
		for _, dir := range []string{"Out", "In"} {
			if g, w := direction(got[kind][0], dir), direction(want[kind][0], dir); !slices.Equal(g, w) {
				t.Errorf("%s, client: %s events\n  %v\nwant gRPC-go's\n  %v", kind, dir, got[kind][0], want[kind][0])
			}
		}
	}
}

// direction returns the events of one direction ("In", "Out"), InTrailer
// left out.
func direction(ev []string, dir string) []string {
	var out []string
	for _, e := range ev {
		if strings.HasPrefix(e, dir) && e != "InTrailer" {
			out = append(out, e)
		}
	}
	return out
}

// TestStatsDelayedPick: a ClientConn's first call waits for its
// connection, and reports DelayedPickComplete right after Begin, before
// its header leaves; a call that finds the connection ready does not
// report it. gRPC-go's client and rdmarpc's, each a call of each kind on
// a new ClientConn, then a unary one. The connection is dialed only once
// the first call waits in the library's pick (its goroutine's stack shows
// it), so the first pick cannot find it ready: without that gate gRPC-go's
// first pick was sometimes not delayed (a few runs in 30 under -race).
func TestStatsDelayedPick(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(gs, allKinds{})
	go gs.Serve(lis)
	defer gs.Stop()
	rl, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := rpc.NewServer()
	testgrpc.RegisterTestServiceServer(grpcgo.NewServer(rs), allKinds{})
	served := make(chan error, 1)
	go func() { served <- rs.Serve(rl) }()
	defer func() { rs.Stop(); <-served }()

	// A library's new ClientConn reporting to ev, dialing through gate,
	// and the function its calls wait for a connection in.
	type lib struct {
		dial    func(ev *events, gate *dialGate) (testgrpc.TestServiceClient, func())
		waitsIn string
	}
	libs := map[string]lib{
		"grpc-go": {func(ev *events, gate *dialGate) (testgrpc.TestServiceClient, func()) {
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithStatsHandler(gEvents{ev}), grpc.WithContextDialer(gate.dial))
			if err != nil {
				t.Fatal(err)
			}
			return testgrpc.NewTestServiceClient(cc), func() { cc.Close() }
		}, "google.golang.org/grpc.(*pickerWrapper).pick("},
		"rdmarpc": {func(ev *events, gate *dialGate) (testgrpc.TestServiceClient, func()) {
			cc, err := rpc.NewClient("tcp://"+rl.Addr().String(), rpc.WithStatsHandler(rEvents{ev}), rpc.WithContextDialer(gate.dial))
			if err != nil {
				t.Fatal(err)
			}
			return testgrpc.NewTestServiceClient(grpcgo.NewClient(cc)), func() { cc.Close() }
		}, "github.com/rdmarpc/rdmarpc/rpc.(*ClientConn).link("},
	}
	ctx := context.Background()
	// The first call of each kind on a new ClientConn.
	firsts := map[string]func(c testgrpc.TestServiceClient) error{
		"unary": func(c testgrpc.TestServiceClient) error {
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			return err
		},
		"server streaming": func(c testgrpc.TestServiceClient) error {
			s, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
			for err == nil {
				_, err = s.Recv()
			}
			if err == io.EOF {
				err = nil
			}
			return err
		},
	}
	for _, name := range []string{"grpc-go", "rdmarpc"} {
		l := libs[name]
		for kind, call := range firsts {
			t.Run(name+"/"+kind, func(t *testing.T) {
				ev := &events{}
				gate := &dialGate{open: make(chan struct{})}
				c, closeCC := l.dial(ev, gate)
				defer closeCC()
				done := make(chan error, 1)
				go func() { done <- call(c) }()
				waitForStack(l.waitsIn)
				close(gate.open)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				first := clientEvents(ev)
				if len(first) < 3 || first[0] != "Begin" || first[1] != "DelayedPickComplete" || first[2] != "OutHeader" || slices.Index(first[2:], "DelayedPickComplete") >= 0 {
					t.Errorf("first call: client events %v, want Begin, DelayedPickComplete, OutHeader first, and it once", first)
				}
				if err := firsts["unary"](c); err != nil {
					t.Fatal(err)
				}
				if next := clientEvents(ev); slices.Contains(next, "DelayedPickComplete") {
					t.Errorf("a call on a ready connection: client events %v, want no DelayedPickComplete", next)
				}
			})
		}
	}
}

// dialGate holds a ClientConn's dials until open is closed.
type dialGate struct{ open chan struct{} }

func (g *dialGate) dial(ctx context.Context, addr string) (net.Conn, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// waitForStack returns once some goroutine's stack holds fn (the test's
// timeout bounds the wait).
func waitForStack(fn string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if strings.Contains(string(buf[:n]), fn) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// clientEvents waits for the client's End of the call in progress and
// takes the client's events.
func clientEvents(ev *events) []string {
	for {
		ev.mu.Lock()
		done := slices.Contains(ev.client, "End")
		ev.mu.Unlock()
		if done {
			cl, _ := ev.take()
			return cl
		}
		time.Sleep(time.Millisecond)
	}
}
