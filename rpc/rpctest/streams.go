package rpctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
)

// The stream service, written by hand in the shape generated code has, so
// the suite needs no generated streaming stubs. Its methods:
//
//	List  (server streaming): reply_size responses, each the request's
//	      payload followed by its index; metadata "fail-after: k" ends the
//	      stream after k responses with FailedPrecondition and a detail.
//	Sum   (client streaming): one response, the requests' payloads joined.
//	Ping  (bidi): echoes every request; the header and trailer echo the
//	      request metadata.
//	Hold  (bidi): blocks until its context ends, and reports how.
const streamService = "rdmarpc.test.Streams"

type streamsServer interface{ isStreams() }

type streamsImpl struct {
	// sent is signalled after each List response the handler sent.
	sent chan int
	// ended receives the context error of every Hold and Ping handler that
	// ended because of its context.
	ended chan error
}

func (*streamsImpl) isStreams() {}

func newStreamsImpl() *streamsImpl {
	return &streamsImpl{sent: make(chan int, 1<<16), ended: make(chan error, 16)}
}

var streamsDesc = rpc.ServiceDesc{
	ServiceName: streamService,
	HandlerType: (*streamsServer)(nil),
	Streams: []rpc.StreamDesc{
		{StreamName: "List", ServerStreams: true, Handler: func(srv any, ss rpc.ServerStream) error {
			in := new(testpb.EchoRequest)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*streamsImpl).list(in, &rpc.GenericServerStream[testpb.EchoRequest, testpb.EchoResponse]{ServerStream: ss})
		}},
		{StreamName: "Sum", ClientStreams: true, Handler: func(srv any, ss rpc.ServerStream) error {
			return srv.(*streamsImpl).sum(&rpc.GenericServerStream[testpb.EchoRequest, testpb.EchoResponse]{ServerStream: ss})
		}},
		{StreamName: "Ping", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss rpc.ServerStream) error {
			return srv.(*streamsImpl).ping(&rpc.GenericServerStream[testpb.EchoRequest, testpb.EchoResponse]{ServerStream: ss})
		}},
		{StreamName: "Hold", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss rpc.ServerStream) error {
			<-ss.Context().Done()
			select {
			case srv.(*streamsImpl).ended <- ss.Context().Err():
			default: // nobody is listening
			}
			return ss.Context().Err()
		}},
		{StreamName: "First", ClientStreams: true, Handler: func(srv any, ss rpc.ServerStream) error {
			if err := ss.RecvMsg(new(testpb.EchoRequest)); err != nil {
				return err
			}
			return status.Error(codes.FailedPrecondition, "one is enough")
		}},
	},
}

var (
	listDesc  = &streamsDesc.Streams[0]
	sumDesc   = &streamsDesc.Streams[1]
	pingDesc  = &streamsDesc.Streams[2]
	holdDesc  = &streamsDesc.Streams[3]
	firstDesc = &streamsDesc.Streams[4]
)

func method(name string) string { return "/" + streamService + "/" + name }

func (s *streamsImpl) list(in *testpb.EchoRequest, ss rpc.ServerStreamingServer[testpb.EchoResponse]) error {
	failAfter := int64(-1)
	if md, ok := metadata.FromIncomingContext(ss.Context()); ok && len(md.Get("fail-after")) > 0 {
		failAfter, _ = strconv.ParseInt(md.Get("fail-after")[0], 10, 64)
	}
	for i := int64(0); i < in.ReplySize; i++ {
		if i == failAfter {
			st, _ := status.New(codes.FailedPrecondition, "failed after "+strconv.Itoa(int(i))).WithDetails(wrapperspb.String("detail"))
			return st.Err()
		}
		if err := ss.Send(&testpb.EchoResponse{Payload: append(bytes.Clone(in.Payload), []byte(strconv.Itoa(int(i)))...)}); err != nil {
			return err
		}
		s.sent <- int(i + 1)
	}
	return nil
}

func (s *streamsImpl) sum(ss rpc.ClientStreamingServer[testpb.EchoRequest, testpb.EchoResponse]) error {
	var all []byte
	for {
		in, err := ss.Recv()
		if err == io.EOF {
			return ss.SendAndClose(&testpb.EchoResponse{Payload: all})
		}
		if err != nil {
			return err
		}
		all = append(all, in.Payload...)
	}
}

func (s *streamsImpl) ping(ss rpc.BidiStreamingServer[testpb.EchoRequest, testpb.EchoResponse]) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if v := md.Get("echo-header"); len(v) > 0 {
		if err := ss.SendHeader(metadata.Pairs("echoed-header", v[0])); err != nil {
			return err
		}
	}
	if v := md.Get("echo-trailer"); len(v) > 0 {
		ss.SetTrailer(metadata.Pairs("echoed-trailer", v[0]))
	}
	for {
		in, err := ss.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if ctxErr := ss.Context().Err(); ctxErr != nil {
				select {
				case s.ended <- ctxErr:
				default: // nobody is listening: many streams ended with their connection
				}
			}
			return err
		}
		if err := ss.Send(&testpb.EchoResponse{Payload: in.Payload}); err != nil {
			return err
		}
	}
}

type echoStream = rpc.GenericClientStream[testpb.EchoRequest, testpb.EchoResponse]

func (s *suite) openStream(t *testing.T, ctx context.Context, cc *rpc.ClientConn, desc *rpc.StreamDesc, name string) *echoStream {
	t.Helper()
	cs, err := cc.NewStream(ctx, desc, method(name))
	if err != nil {
		t.Fatalf("NewStream(%s): %v", name, err)
	}
	return &echoStream{ClientStream: cs}
}

// list opens a List stream for n responses of payload p.
func (s *suite) list(t *testing.T, ctx context.Context, cc *rpc.ClientConn, n int, p []byte) *echoStream {
	t.Helper()
	st := s.openStream(t, ctx, cc, listDesc, "List")
	if err := st.Send(&testpb.EchoRequest{Payload: p, ReplySize: int64(n)}); err != nil {
		t.Fatalf("List: Send: %v", err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatalf("List: CloseSend: %v", err)
	}
	return st
}

// readList reads the n responses of a List stream and its io.EOF.
func readList(t *testing.T, st *echoStream, n int, p []byte) {
	t.Helper()
	for i := range n {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("List: Recv %d: %v", i, err)
		}
		if want := append(bytes.Clone(p), strconv.Itoa(i)...); !bytes.Equal(m.Payload, want) {
			t.Fatalf("List: response %d is %d bytes %.20q…, want %d bytes %.20q…", i, len(m.Payload), m.Payload, len(want), want)
		}
	}
	if m, err := st.Recv(); err != io.EOF {
		t.Fatalf("List: Recv after %d responses: %v, %v; want io.EOF", n, m, err)
	}
}

func (s *suite) testServerStreaming(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	ctx := s.ctx(t)
	for _, size := range []int{0, 10, 100 << 10} {
		p := bytes.Repeat([]byte{'x'}, size)
		st := s.list(t, ctx, cc, 20, p)
		readList(t, st, 20, p)
		if md := st.Trailer(); len(md) != 0 {
			t.Errorf("trailer %v, want none", md)
		}
	}
}

func (s *suite) testClientStreaming(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	st := s.openStream(t, s.ctx(t), cc, sumDesc, "Sum")
	var want []byte
	for i := range 200 {
		p := []byte(fmt.Sprintf("<%d>", i))
		want = append(want, p...)
		if err := st.Send(&testpb.EchoRequest{Payload: p}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	m, err := st.CloseAndRecv()
	if err != nil || !bytes.Equal(m.Payload, want) {
		t.Fatalf("CloseAndRecv: %d bytes, %v; want %d bytes", len(m.GetPayload()), err, len(want))
	}
}

func (s *suite) testBidiPingPong(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	st := s.openStream(t, s.ctx(t), cc, pingDesc, "Ping")
	for i := range 100 {
		p := bytes.Repeat([]byte{byte(i)}, i*100)
		if err := st.Send(&testpb.EchoRequest{Payload: p}); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		m, err := st.Recv()
		if err != nil || !bytes.Equal(m.Payload, p) {
			t.Fatalf("Recv %d: %v; want the %d bytes sent", i, err, len(p))
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
	}
}

func (s *suite) testEmptyStream(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	st := s.openStream(t, s.ctx(t), cc, pingDesc, "Ping")
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv: %v, %v; want io.EOF", m, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatalf("a second CloseSend: %v, want nil", err)
	}
}

func (s *suite) testCancelAfterFirstResponse(t *testing.T) {
	e := s.start(t)
	impl := e.streams
	cc, _ := s.dial(t, e)
	ctx, cancel := context.WithCancel(s.ctx(t))
	defer cancel()
	st := s.openStream(t, ctx, cc, pingDesc, "Ping")
	if err := st.Send(&testpb.EchoRequest{Payload: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err := st.Recv()
	wantCode(t, "Recv after cancel", err, codes.Canceled, "")
	if err := st.Send(&testpb.EchoRequest{}); err != io.EOF {
		t.Fatalf("Send after cancel: %v, want io.EOF", err)
	}
	got := s.recvErr(t, "the handler to see the cancel", impl.ended)
	if !errors.Is(got, context.Canceled) {
		t.Fatalf("the server's stream context ended with %v, want context.Canceled", got)
	}
	// The connection still serves.
	readList(t, s.list(t, s.ctx(t), cc, 3, nil), 3, nil)
}

func (s *suite) testStreamDeadline(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	ctx, cancel := context.WithTimeout(s.ctx(t), 20e6) // 20 ms: the handler never answers, however slow the machine
	defer cancel()
	st := s.openStream(t, ctx, cc, holdDesc, "Hold")
	_, err := st.Recv()
	wantCode(t, "Recv on a sleeping server", err, codes.DeadlineExceeded, "")
	got := s.recvErr(t, "the handler to end", e.streams.ended)
	if !errors.Is(got, context.DeadlineExceeded) && !errors.Is(got, context.Canceled) {
		t.Fatalf("the server's stream context ended with %v", got)
	}
}

// recvErr receives from ch, giving up after the suite's timeout (a hang
// guard). It starts no goroutine, so a test that gives up leaks none and
// the leak check of the tests after it stays meaningful.
func (s *suite) recvErr(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(s.cfg.Timeout):
		t.Fatalf("timed out after %v waiting for %s", s.cfg.Timeout, what)
		return nil
	}
}

func (s *suite) testStreamMetadata(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	ctx := metadata.AppendToOutgoingContext(s.ctx(t), "echo-header", "h1", "echo-trailer", "t1")
	st := s.openStream(t, ctx, cc, pingDesc, "Ping")
	md, err := st.Header()
	if err != nil || md.Get("echoed-header")[0] != "h1" {
		t.Fatalf("Header: %v, %v; want echoed-header: h1 before any message", md, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv: %v, want io.EOF", err)
	}
	if tr := st.Trailer(); len(tr.Get("echoed-trailer")) != 1 || tr.Get("echoed-trailer")[0] != "t1" {
		t.Fatalf("Trailer: %v; want echoed-trailer: t1", tr)
	}
}

func (s *suite) testStreamStatusMidStream(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	ctx := metadata.AppendToOutgoingContext(s.ctx(t), "fail-after", "2")
	st := s.list(t, ctx, cc, 5, []byte("m"))
	for i := range 2 {
		if _, err := st.Recv(); err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
	}
	_, err := st.Recv()
	wantCode(t, "Recv after 2", err, codes.FailedPrecondition, "failed after 2")
	d := status.Convert(err).Details()
	if len(d) != 1 || d[0].(*wrapperspb.StringValue).GetValue() != "detail" {
		t.Fatalf("details %v, want the one string detail", d)
	}
	if _, err2 := st.Recv(); status.Code(err2) != codes.FailedPrecondition {
		t.Fatalf("Recv again: %v, want the same status", err2)
	}
}

// testStalledStream: a stream whose client reads nothing fills its window
// and stops its handler, and nothing else on the connection notices.
func (s *suite) testStalledStream(t *testing.T) {
	e := s.start(t)
	cc, client := s.dial(t, e)
	ctx := s.ctx(t)
	p := bytes.Repeat([]byte{'s'}, 16<<10)
	const n = 64 // 1 MiB, sixteen windows
	stalled := s.list(t, ctx, cc, n, p)
	// Four messages fill the 64 KiB window; the handler then waits.
	for got := 0; got < 4; {
		select {
		case got = <-e.streams.sent:
		case <-ctx.Done():
			t.Fatal("the stalled stream's handler sent less than its window")
		}
	}
	// Other streams and unary calls on the same connection go on, more
	// bytes than the window many times over.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := s.list(t, ctx, cc, n, p)
			readList(t, st, n, p)
		}()
	}
	for i := range 50 {
		if _, err := client.Echo(ctx, &testpb.EchoRequest{Payload: p}); err != nil {
			t.Fatalf("Echo %d next to a stalled stream: %v", i, err)
		}
	}
	wg.Wait()
	// The stalled stream lost nothing.
	readList(t, stalled, n, p)
}

func (s *suite) testManyStreams(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	// A thousand streams are a lot of work in an emulated guest: the
	// bound here only catches a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*s.cfg.Timeout)
	defer cancel()
	const n = 1000
	streams := make([]*echoStream, n)
	for i := range streams {
		streams[i] = s.openStream(t, ctx, cc, pingDesc, "Ping")
	}
	// All 1000 are open at once: each answers one message before any
	// closes.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := []byte(strconv.Itoa(i))
			if err := st.Send(&testpb.EchoRequest{Payload: p}); err != nil {
				errs <- err
				return
			}
			if m, err := st.Recv(); err != nil || !bytes.Equal(m.Payload, p) {
				errs <- fmt.Errorf("stream %d: Recv: %v", i, err)
			}
		}()
	}
	wg.Wait()
	// The first phase's failures first: a connection lost there would
	// otherwise show only as a failed Recv after CloseSend.
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Closed all at once, not one round trip after another, which the
	// emulated RDMA guest makes slow.
	for _, st := range streams {
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range streams {
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv after CloseSend: %v", err)
		}
	}
}

func (s *suite) testStreamUnimplemented(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	st := s.openStream(t, s.ctx(t), cc, pingDesc, "Nope")
	_, err := st.Recv()
	wantCode(t, "Recv on an unknown method", err, codes.Unimplemented, "unknown method Nope")
	cs, err := cc.NewStream(s.ctx(t), pingDesc, "/no.Such/Thing")
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RecvMsg on an unknown service", cs.RecvMsg(new(testpb.EchoResponse)), codes.Unimplemented, "unknown service no.Such")
}

// testStreamInterceptors: stream interceptors given as a list run in list
// order, the first outermost, on both ends, as the unary ones.
func (s *suite) testStreamInterceptors(t *testing.T) {
	// Each end's order, kept apart: the server's chain may start before
	// the client's has returned (the OPEN has left by then).
	var mu sync.Mutex
	var order []string
	var serverOrder []string
	record := func(what string) {
		mu.Lock()
		if strings.HasPrefix(what, "server ") {
			serverOrder = append(serverOrder, what)
		} else {
			order = append(order, what)
		}
		mu.Unlock()
	}
	server := func(name string) rpc.StreamServerInterceptor {
		return func(srv any, ss rpc.ServerStream, info *rpc.StreamServerInfo, handler rpc.StreamHandler) error {
			record(fmt.Sprintf("server %s in %s client=%v server=%v", name, info.FullMethod, info.IsClientStream, info.IsServerStream))
			err := handler(srv, ss)
			record("server " + name + " out")
			return err
		}
	}
	client := func(name string) rpc.StreamClientInterceptor {
		return func(ctx context.Context, desc *rpc.StreamDesc, cc *rpc.ClientConn, method string, streamer rpc.Streamer, opts ...rpc.CallOption) (rpc.ClientStream, error) {
			record("client " + name + " in")
			cs, err := streamer(ctx, desc, cc, method, opts...)
			record("client " + name + " out")
			return cs, err
		}
	}
	e := s.start(t, rpc.StreamInterceptor(server("A")), rpc.ChainStreamInterceptor(server("B"), server("C")))
	cc, _ := s.dial(t, e, rpc.WithChainStreamInterceptor(client("A"), client("B")), rpc.WithStreamInterceptor(client("C")))
	st := s.list(t, s.ctx(t), cc, 1, nil)
	readList(t, st, 1, nil)
	mu.Lock()
	defer mu.Unlock()
	m := method("List")
	want := []string{
		"client A in", "client B in", "client C in", "client C out", "client B out", "client A out",
		"server A in " + m + " client=false server=true", "server B in " + m + " client=false server=true", "server C in " + m + " client=false server=true",
		"server C out", "server B out", "server A out",
	}
	if got := append(order, serverOrder...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order:\n%q\nwant\n%q", got, want)
	}
}

// testStreamMessageSizes: every message of a stream is held to the limits
// of both ends.
func (s *suite) testStreamMessageSizes(t *testing.T) {
	e := s.start(t, rpc.MaxRecvMsgSize(1<<10))
	cc, _ := s.dial(t, e)
	ctx := s.ctx(t)

	// Larger than the client's own send limit: refused before it leaves,
	// and the stream goes on.
	st := s.openStream(t, ctx, cc, pingDesc, "Ping")
	cs, err := cc.NewStream(ctx, pingDesc, method("Ping"), rpc.MaxCallSendMsgSize(10))
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "SendMsg over the call's send limit", cs.SendMsg(&testpb.EchoRequest{Payload: make([]byte, 100)}), codes.ResourceExhausted, "larger than the limit")
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(testpb.EchoResponse)); err != io.EOF {
		t.Fatalf("RecvMsg after the refused send: %v, want io.EOF", err)
	}

	// Larger than the server's receive limit: the stream fails with
	// ResourceExhausted.
	if err := st.Send(&testpb.EchoRequest{Payload: make([]byte, 2<<10)}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCode(t, "Recv after a message over the server's limit", err, codes.ResourceExhausted, "larger than the limit")

	// Larger than the client's receive limit for this call.
	small := s.openStream(t, ctx, cc, pingDesc, "Ping")
	cs, err = cc.NewStream(ctx, pingDesc, method("Ping"), rpc.MaxCallRecvMsgSize(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&testpb.EchoRequest{Payload: make([]byte, 500)}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "RecvMsg over the call's receive limit", cs.RecvMsg(new(testpb.EchoResponse)), codes.ResourceExhausted, "larger than the limit")
	// Other streams are unaffected.
	if err := small.Send(&testpb.EchoRequest{Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if m, err := small.Recv(); err != nil || string(m.Payload) != "ok" {
		t.Fatalf("Recv on another stream: %v, %v", m, err)
	}
}

// testOlderPeer: a server speaking wire version 2 (before SETTINGS)
// refuses the client's first frame with a version 2 GOAWAY; the client's
// dial fails at once, Unavailable, with a message that names both
// versions, and hangs nowhere.
func (s *suite) testOlderPeer(t *testing.T) {
	ctx := s.ctx(t)
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		tc, err := lis.Accept(ctx)
		if err != nil {
			return
		}
		defer tc.Close()
		if b, err := tc.Recv(ctx); err == nil {
			b.Release()
		}
		goaway := wire.AppendGoAway(nil, uint32(codes.Internal), "protocol error: unsupported frame version 3 (this side speaks 2)")
		goaway[0] = 2
		_ = tc.Send(ctx, goaway)
		// Wait for the client to close.
		for {
			b, err := tc.Recv(ctx)
			if err != nil {
				return
			}
			b.Release()
		}
	}()
	_, err = rpc.Dial(ctx, lis.Addr().String(), rpc.WithTransport(s.cfg.Transport))
	wantCode(t, "a dial to a version 2 server", err, codes.Unavailable, "unsupported frame version 2 (this side speaks 3): upgrade the older peer")
	s.waitFor(t, "the version 2 server to see the close", served)
}

// testHandlerEndsEarly: a client-streaming handler that returns after the
// first message while the client streams on: the client's sends end with
// io.EOF, and it gets the handler's status, never a reset for the messages
// that crossed the end.
func (s *suite) testHandlerEndsEarly(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	for range 20 {
		st := s.openStream(t, s.ctx(t), cc, firstDesc, "First")
		for range 200 {
			if err := st.Send(&testpb.EchoRequest{Payload: []byte("more")}); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("Send: %v", err)
			}
		}
		_, err := st.CloseAndRecv()
		wantCode(t, "CloseAndRecv", err, codes.FailedPrecondition, "one is enough")
	}
}

// testManyLargeStreams: many streams at once, each with a message larger
// than its window, on connections whose windows hold only a few of them,
// while every caller and handler reads: the connection window pushes the
// senders back, and no stream fails. Responses (the client's window) and
// requests (the server's) both.
func (s *suite) testManyLargeStreams(t *testing.T) {
	const (
		size       = 100 << 10 // more than the 64 KiB stream window
		connWindow = 256 << 10 // two of them, and part of a third
	)
	n := 300
	if s.cfg.Light {
		n = 100 // still 40 times what the connection window holds
	}
	e := s.start(t, rpc.InitialConnWindowSize(connWindow))
	cc, _ := s.dial(t, e, rpc.WithInitialConnWindowSize(connWindow))
	// Each part moves 60 MB (20 MB Light): a lot of work in an emulated guest (about
	// 1 MB/s under -race), so the bound here only catches a hang.
	hangGuard := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*s.cfg.Timeout)
	}
	p := bytes.Repeat([]byte{'l'}, size)

	t.Run("responses", func(t *testing.T) {
		ctx, cancel := hangGuard()
		defer cancel()
		// The callers read once the server sent more than the client's
		// connection window holds: without pushback, it would hold more.
		enough := make(chan struct{})
		go func() {
			for sent := 0; sent < connWindow/size; sent++ {
				select {
				case <-e.streams.sent:
				case <-ctx.Done():
					return
				}
			}
			close(enough)
		}()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := cc.NewStream(ctx, listDesc, method("List"))
				if err != nil {
					errs <- fmt.Errorf("stream %d: NewStream: %v", i, err)
					return
				}
				ls := &echoStream{ClientStream: st}
				if err := ls.Send(&testpb.EchoRequest{Payload: p, ReplySize: 1}); err != nil {
					errs <- fmt.Errorf("stream %d: Send: %v", i, err)
					return
				}
				if err := ls.CloseSend(); err != nil {
					errs <- fmt.Errorf("stream %d: CloseSend: %v", i, err)
					return
				}
				select {
				case <-enough:
				case <-ctx.Done():
				}
				m, err := ls.Recv()
				if err != nil || len(m.Payload) != size+1 {
					errs <- fmt.Errorf("stream %d: Recv: %d bytes, %v; want %d bytes", i, len(m.GetPayload()), err, size+1)
					return
				}
				if _, err := ls.Recv(); err != io.EOF {
					errs <- fmt.Errorf("stream %d: Recv after the response: %v, want io.EOF", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("requests", func(t *testing.T) {
		ctx, cancel := hangGuard()
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := cc.NewStream(ctx, sumDesc, method("Sum"))
				if err != nil {
					errs <- fmt.Errorf("stream %d: NewStream: %v", i, err)
					return
				}
				ss := &echoStream{ClientStream: st}
				if err := ss.Send(&testpb.EchoRequest{Payload: p}); err != nil {
					errs <- fmt.Errorf("stream %d: Send: %v", i, err)
					return
				}
				m, err := ss.CloseAndRecv()
				if err != nil || len(m.Payload) != size {
					errs <- fmt.Errorf("stream %d: CloseAndRecv: %d bytes, %v; want %d bytes", i, len(m.GetPayload()), err, size)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
