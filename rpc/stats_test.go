package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// recorder is a stats.Handler that writes down every event, per side and
// per RPC (by method), and adds a trace header to the client's calls.
type recorder struct {
	mu     sync.Mutex
	events map[string][]stats.RPCStats // "client /svc/M" → events in order
	conns  []string
	infos  []*stats.ConnTagInfo
	traces []string // the x-trace the server's TagRPC saw
	// withConn: per side and method, for each event, whether its context
	// held the connection's tag.
	withConn map[string][]bool
}

type methodKey struct{}

type connKey struct{}

func newRecorder() *recorder {
	return &recorder{events: make(map[string][]stats.RPCStats), withConn: make(map[string][]bool)}
}

func side(client bool) string {
	if client {
		return "client"
	}
	return "server"
}

func (r *recorder) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		r.mu.Lock()
		r.traces = append(r.traces, strings.Join(md.Get("x-trace"), ","))
		r.mu.Unlock()
	} else {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-trace", "t-"+info.FullMethodName)
	}
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (r *recorder) HandleRPC(ctx context.Context, s stats.RPCStats) {
	k := side(s.IsClient()) + " " + ctx.Value(methodKey{}).(string)
	r.mu.Lock()
	r.events[k] = append(r.events[k], s)
	r.withConn[k] = append(r.withConn[k], ctx.Value(connKey{}) != nil)
	r.mu.Unlock()
}

func (r *recorder) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	r.mu.Lock()
	r.infos = append(r.infos, info)
	r.mu.Unlock()
	return context.WithValue(ctx, connKey{}, info)
}

func (r *recorder) HandleConn(ctx context.Context, s stats.ConnStats) {
	r.mu.Lock()
	r.conns = append(r.conns, fmt.Sprintf("%s %T", side(s.IsClient()), s))
	r.mu.Unlock()
}

// kinds names the events of one side of one RPC once it has ended
// (waiting for its End, which the server reports after the client has its
// response).
func (r *recorder) kinds(t *testing.T, key string) ([]string, []stats.RPCStats) {
	t.Helper()
	waitUntil(t, "the End of "+key, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		ev := r.events[key]
		return len(ev) > 0 && isEnd(ev[len(ev)-1])
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := slices.Clone(r.events[key])
	names := make([]string, len(ev))
	for i, s := range ev {
		names[i] = strings.TrimPrefix(fmt.Sprintf("%T", s), "*stats.")
	}
	return names, ev
}

func isEnd(s stats.RPCStats) bool { _, ok := s.(*stats.End); return ok }

func find[T stats.RPCStats](ev []stats.RPCStats) []T {
	var out []T
	for _, s := range ev {
		if v, ok := s.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestStatsUnary(t *testing.T) {
	rec, second := newRecorder(), newRecorder()
	s := startServer(t, pipe.New(pipe.Options{}), newGate(), rpc.StatsHandler(rec), rpc.StatsHandler(second))
	cc, c := s.dial(t, rpc.WithStatsHandler(rec))
	ctx := testCtx(t)

	req := &testpb.EchoRequest{Payload: make([]byte, 100)}
	if _, err := c.Echo(ctx, req); err != nil {
		t.Fatal(err)
	}
	const echo = "/rdmarpc.test.v1.Test/Echo"
	got, ev := rec.kinds(t, "client "+echo)
	want := []string{"Begin", "OutHeader", "OutPayload", "InHeader", "InTrailer", "InPayload", "End"}
	if !slices.Equal(got, want) {
		t.Errorf("client events %v, want %v", got, want)
	}
	size := proto.Size(req)
	if out := find[*stats.OutPayload](ev); len(out) != 1 || out[0].Length != size || out[0].WireLength <= size || out[0].Payload != req {
		t.Errorf("client OutPayload %+v, want Length %d, a larger WireLength, the request", out, size)
	}
	if h := find[*stats.OutHeader](ev); len(h) != 1 || h[0].FullMethod != echo || h[0].RemoteAddr == nil || h[0].Header.Get("x-trace")[0] != "t-"+echo {
		t.Errorf("client OutHeader %+v: want the method, the address and the tagged metadata", h)
	}
	if in := find[*stats.InPayload](ev); len(in) != 1 || in[0].Length != size {
		t.Errorf("client InPayload %+v, want Length %d", in, size)
	}
	if e := find[*stats.End](ev); e[0].Error != nil || e[0].EndTime.Before(e[0].BeginTime) {
		t.Errorf("client End %+v", e[0])
	}
	if b := find[*stats.Begin](ev); !b[0].Client || b[0].IsClientStream || b[0].IsServerStream || !b[0].FailFast {
		t.Errorf("client Begin %+v: want a fail-fast unary call", b[0])
	}

	for _, r := range []*recorder{rec, second} {
		got, ev = r.kinds(t, "server "+echo)
		want = []string{"InHeader", "Begin", "InPayload", "OutHeader", "OutPayload", "OutTrailer", "End"}
		if !slices.Equal(got, want) {
			t.Errorf("server events %v, want %v", got, want)
		}
		if h := find[*stats.InHeader](ev); h[0].FullMethod != echo || h[0].RemoteAddr == nil || h[0].WireLength <= 0 {
			t.Errorf("server InHeader %+v", h[0])
		}
		if in := find[*stats.InPayload](ev); in[0].Length != size || in[0].WireLength <= size {
			t.Errorf("server InPayload %+v, want Length %d and more on the wire", in[0], size)
		}
		if out := find[*stats.OutPayload](ev); out[0].Length != size {
			t.Errorf("server OutPayload %+v, want Length %d", out[0], size)
		}
	}
	rec.mu.Lock()
	traces := slices.Clone(rec.traces)
	// What TagConn added is in every event's context on the server, as in
	// gRPC-go, and on the client once the call has its connection.
	if w := rec.withConn["server "+echo]; slices.Contains(w, false) {
		t.Errorf("server events with the connection's tag: %v, want all", w)
	}
	if w := rec.withConn["client "+echo]; !slices.Equal(w, []bool{false, true, true, true, true, true, true}) {
		t.Errorf("client events with the connection's tag: %v, want all but Begin", w)
	}
	rec.mu.Unlock()
	if !slices.Equal(traces, []string{"t-" + echo}) {
		t.Errorf("the server's TagRPC saw x-trace %q, want what the client's added", traces)
	}

	// An error: no payload comes back, End carries the status.
	// (The gate does not implement Fail: Unimplemented.)
	_, err := c.Fail(ctx, &testpb.FailRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("Fail: %v", err)
	}
	const fail = "/rdmarpc.test.v1.Test/Fail"
	got, ev = rec.kinds(t, "client "+fail)
	if want := []string{"Begin", "OutHeader", "OutPayload", "InHeader", "InTrailer", "End"}; !slices.Equal(got, want) {
		t.Errorf("client events of a failed call %v, want %v", got, want)
	}
	if e := find[*stats.End](ev); status.Code(e[0].Error) != codes.Unimplemented {
		t.Errorf("client End error %v, want Unimplemented", e[0].Error)
	}
	got, ev = rec.kinds(t, "server "+fail)
	if want := []string{"InHeader", "Begin", "InPayload", "OutHeader", "OutTrailer", "End"}; !slices.Equal(got, want) {
		t.Errorf("server events of a failed call %v, want %v", got, want)
	}
	if e := find[*stats.End](ev); status.Code(e[0].Error) != codes.Unimplemented {
		t.Errorf("server End error %v, want Unimplemented", e[0].Error)
	}

	cc.Close()
	waitUntil(t, "both ends' ConnEnd", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.conns) == 4
	})
	rec.mu.Lock()
	conns := slices.Clone(rec.conns)
	rec.mu.Unlock()
	slices.Sort(conns)
	if want := []string{"client *stats.ConnBegin", "client *stats.ConnEnd", "server *stats.ConnBegin", "server *stats.ConnEnd"}; !slices.Equal(conns, want) {
		t.Errorf("connection events %v, want %v", conns, want)
	}
}

// counting is a transport whose connections count, as rdma's do.
type counting struct{ transport.Transport }

type countingConn struct{ transport.Conn }

func (countingConn) Counters() map[string]uint64 { return map[string]uint64{"credit_waits": 7} }
func (countingConn) Scheme() string              { return "counting" }

func (t counting) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := t.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{c}, nil
}

func TestStatsConnCounters(t *testing.T) {
	rec := newRecorder()
	s := startServer(t, pipe.New(pipe.Options{}), newGate())
	s.tr = counting{s.tr}
	_, c := s.dial(t, rpc.WithStatsHandler(rec))
	if _, err := c.Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.infos) != 1 {
		t.Fatalf("%d ConnTagInfos, want 1", len(rec.infos))
	}
	info := rec.infos[0]
	if info.Transport != "counting" || info.Counters == nil || info.Counters.Counters()["credit_waits"] != 7 || info.RemoteAddr == nil {
		t.Errorf("ConnTagInfo %+v: want transport pipe and the connection's counters", info)
	}
}

// The streaming methods of a service of the test's own.
var statsStreams = rpc.ServiceDesc{
	ServiceName: "stats.Streams",
	HandlerType: (*any)(nil),
	Streams: []rpc.StreamDesc{
		{StreamName: "List", ServerStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			in := new(testpb.EchoRequest)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			for range 3 {
				if err := ss.SendMsg(&testpb.EchoResponse{Payload: in.Payload}); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Sum", ClientStreams: true, Handler: func(_ any, ss rpc.ServerStream) error {
			n := 0
			for {
				in := new(testpb.EchoRequest)
				err := ss.RecvMsg(in)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				n += len(in.Payload)
			}
			ss.SetTrailer(metadata.Pairs("sum", fmt.Sprint(n)))
			return ss.SendMsg(&testpb.EchoResponse{Payload: make([]byte, n)})
		}},
	},
}

func TestStatsStreams(t *testing.T) {
	rec := newRecorder()
	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer(rpc.StatsHandler(rec))
	srv.RegisterService(&statsStreams, struct{}{})
	lis, err := tr.Listen("stats:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	ctx := testCtx(t)
	cc, err := rpc.Dial(ctx, "pipe://"+lis.Addr().String(), rpc.WithTransport(tr), rpc.WithStatsHandler(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	// Server streaming: one request, three responses.
	cs, err := cc.NewStream(ctx, &statsStreams.Streams[0], "/stats.Streams/List")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&testpb.EchoRequest{Payload: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	for {
		if err := cs.RecvMsg(new(testpb.EchoResponse)); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	got, ev := rec.kinds(t, "client /stats.Streams/List")
	want := []string{"Begin", "OutHeader", "OutPayload", "InHeader", "InPayload", "InPayload", "InPayload", "InTrailer", "End"}
	if !slices.Equal(got, want) {
		t.Errorf("client events %v, want %v", got, want)
	}
	if b := find[*stats.Begin](ev); b[0].IsClientStream || !b[0].IsServerStream {
		t.Errorf("client Begin %+v: want a server stream", b[0])
	}
	if e := find[*stats.End](ev); e[0].Error != nil {
		t.Errorf("client End: %v", e[0].Error)
	}
	got, _ = rec.kinds(t, "server /stats.Streams/List")
	want = []string{"InHeader", "Begin", "InPayload", "OutHeader", "OutPayload", "OutPayload", "OutPayload", "OutTrailer", "End"}
	if !slices.Equal(got, want) {
		t.Errorf("server events %v, want %v", got, want)
	}

	// Client streaming: three requests, one response and a trailer.
	cs, err = cc.NewStream(ctx, &statsStreams.Streams[1], "/stats.Streams/Sum")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := cs.SendMsg(&testpb.EchoRequest{Payload: []byte("xy")}); err != nil {
			t.Fatal(err)
		}
	}
	cs.CloseSend()
	if err := cs.RecvMsg(new(testpb.EchoResponse)); err != nil {
		t.Fatal(err)
	}
	got, ev = rec.kinds(t, "client /stats.Streams/Sum")
	want = []string{"Begin", "OutHeader", "OutPayload", "OutPayload", "OutPayload", "InHeader", "InPayload", "InTrailer", "End"}
	if !slices.Equal(got, want) {
		t.Errorf("client events %v, want %v", got, want)
	}
	if e := find[*stats.End](ev); e[0].Trailer.Get("sum")[0] != "6" {
		t.Errorf("client End trailer %v, want sum=6", e[0].Trailer)
	}
	got, ev = rec.kinds(t, "server /stats.Streams/Sum")
	want = []string{"InHeader", "Begin", "InPayload", "InPayload", "InPayload", "OutHeader", "OutPayload", "OutTrailer", "End"}
	if !slices.Equal(got, want) {
		t.Errorf("server events %v, want %v", got, want)
	}
	if b := find[*stats.Begin](ev); !b[0].IsClientStream || b[0].IsServerStream {
		t.Errorf("server Begin %+v: want a client stream", b[0])
	}

	// A stream the caller cancels ends with Canceled, once.
	sctx, cancel := context.WithCancel(ctx)
	cs, err = cc.NewStream(sctx, &statsStreams.Streams[1], "/stats.Streams/Sum")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := cs.RecvMsg(new(testpb.EchoResponse)); status.Code(err) != codes.Canceled {
		t.Fatalf("RecvMsg after cancel: %v", err)
	}
	rec.mu.Lock()
	ev = slices.Clone(rec.events["client /stats.Streams/Sum"])
	rec.mu.Unlock()
	if e := find[*stats.End](ev); len(e) != 2 || status.Code(e[1].Error) != codes.Canceled {
		t.Errorf("client Ends %+v: want a second one, Canceled", e)
	}
}

// pastDeadline is a context whose deadline has passed but which has not
// said so yet, as a context between its deadline and its timer.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// A failed NewStream returns a nil ClientStream, not a nil *clientStream
// in a non-nil interface.
func TestNewStreamFailsWithNilStream(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	srv := rpc.NewServer()
	srv.RegisterService(&statsStreams, struct{}{})
	lis, err := tr.Listen("nilstream:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-done
	}()
	cc, err := rpc.Dial(testCtx(t), "pipe://"+lis.Addr().String(), rpc.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cs, err := cc.NewStream(pastDeadline{context.Background()}, &statsStreams.Streams[0], "/stats.Streams/List")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("NewStream past its deadline: %v, want DeadlineExceeded", err)
	}
	if cs != nil {
		t.Errorf("NewStream failed with a non-nil stream %#v", cs)
	}
}
