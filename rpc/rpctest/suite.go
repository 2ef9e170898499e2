package rpctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/test/conformance"
)

// Config says which transport the suite runs over.
type Config = conformance.Config

// Run runs the RPC suite over cfg.Transport.
func Run(t *testing.T, cfg Config) {
	s := &suite{cfg: cfg.WithDefaults()}
	conformance.Run(t, s.cfg, []conformance.Test{
		{"Echo", s.testEcho},
		{"Concurrent", s.testConcurrent},
		{"StatusCodes", s.testStatusCodes},
		{"Unimplemented", s.testUnimplemented},
		{"Deadline", s.testDeadline},
		{"Cancel", s.testCancel},
		{"SlotsFull", s.testSlotsFull},
		{"Metadata", s.testMetadata},
		{"IncomingMetadata", s.testIncomingMetadata},
		{"AuthInterceptor", s.testAuthInterceptor},
		{"Interceptors", s.testInterceptors},
		{"MessageSizes", s.testMessageSizes},
		{"Panic", s.testPanic},
		{"ClientVanishes", s.testClientVanishes},
		{"KeepaliveDeadServer", s.testKeepaliveDeadServer},
		{"KeepaliveDeadClient", s.testKeepaliveDeadClient},
		{"GracefulStop", s.testGracefulStop},
		{"Stop", s.testStop},
		{"Reconnect", s.testReconnect},
		{"ClientClose", s.testClientClose},
		{"BadFrames", s.testBadFrames},
		{"BadResponses", s.testBadResponses},
		{"ServerStreaming", s.testServerStreaming},
		{"ClientStreaming", s.testClientStreaming},
		{"BidiPingPong", s.testBidiPingPong},
		{"EmptyStream", s.testEmptyStream},
		{"CancelAfterFirstResponse", s.testCancelAfterFirstResponse},
		{"StreamDeadline", s.testStreamDeadline},
		{"StreamMetadata", s.testStreamMetadata},
		{"StreamStatusMidStream", s.testStreamStatusMidStream},
		{"StalledStream", s.testStalledStream},
		{"ManyStreams", s.testManyStreams},
		{"ManyLargeStreams", s.testManyLargeStreams},
		{"StreamUnimplemented", s.testStreamUnimplemented},
		{"HandlerEndsEarly", s.testHandlerEndsEarly},
		{"StreamInterceptors", s.testStreamInterceptors},
		{"StreamMessageSizes", s.testStreamMessageSizes},
		{"OlderPeer", s.testOlderPeer},
		{"BadStreamFrames", s.testBadStreamFrames},
		{"StreamOnDrainingConnection", s.testStreamOnDrainingConnection},
		{"Stats", s.testStats},
	})
}

type suite struct{ cfg Config }

func (s *suite) ctx(t *testing.T) context.Context { return s.cfg.Context(t) }

// env is one server under test.
type env struct {
	svc     *testService
	streams *streamsImpl
	srv     *rpc.Server
	addr    string
	logs    *observer.ObservedLogs
	serve   chan error // Serve's result
}

// start starts a server with the Test service on a new listener; it is
// stopped when the test ends, and Serve must have returned nil.
func (s *suite) start(t *testing.T, opts ...rpc.ServerOption) *env {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	e := &env{svc: newTestService(), streams: newStreamsImpl(), logs: logs, serve: make(chan error, 1)}
	e.srv = rpc.NewServer(append([]rpc.ServerOption{rpc.Logger(zap.New(core))}, opts...)...)
	testpb.RegisterTestServer(e.srv, e.svc)
	e.srv.RegisterService(&streamsDesc, e.streams)
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatalf("Listen(%q): %v", s.cfg.Addr, err)
	}
	e.addr = lis.Addr().String()
	go func() { e.serve <- e.srv.Serve(lis) }()
	t.Cleanup(func() {
		e.srv.Stop()
		// ErrServerStopped: Stop came before the Serve goroutine got to
		// serving (a test that ends at once, on a loaded machine), which
		// gRPC-go answers so too.
		if err := <-e.serve; err != nil && !errors.Is(err, rpc.ErrServerStopped) {
			t.Errorf("Serve returned %v after Stop, want nil", err)
		}
	})
	return e
}

// dial connects a client to e; it is closed when the test ends.
func (s *suite) dial(t *testing.T, e *env, opts ...rpc.DialOption) (*rpc.ClientConn, testpb.TestClient) {
	t.Helper()
	cc, err := rpc.Dial(s.ctx(t), e.addr, append([]rpc.DialOption{rpc.WithTransport(s.cfg.Transport)}, opts...)...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", e.addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, testpb.NewTestClient(cc)
}

// wantCode fails the test unless err has code c (and, if non-empty, a
// message containing msg).
func wantCode(t *testing.T, what string, err error, c codes.Code, msg string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != c || !strings.Contains(st.Message(), msg) {
		t.Fatalf("%s: got %v (%v), want code %v with a message containing %q", what, st.Code(), err, c, msg)
	}
}

// waitFor waits for ch to close, failing on a hang.
func (s *suite) waitFor(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(s.cfg.Timeout):
		t.Fatalf("timed out after %v waiting for %s", s.cfg.Timeout, what)
	}
}

func (s *suite) testEcho(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	for _, n := range []int{0, 1, 100, 4096, 65536, 1 << 20, 4<<20 - 64} {
		payload := bytes.Repeat([]byte{byte(n)}, n)
		resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: payload})
		if err != nil {
			t.Fatalf("Echo(%d bytes): %v", n, err)
		}
		if !bytes.Equal(resp.Payload, payload) {
			t.Fatalf("Echo(%d bytes) returned %d different bytes", n, len(resp.Payload))
		}
	}
}

func (s *suite) testConcurrent(t *testing.T) {
	e := s.start(t)
	cc, c := s.dial(t, e)
	ctx := s.ctx(t)
	const callers, calls = 32, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				want := []byte(fmt.Sprintf("caller %d call %d %s", g, i, strings.Repeat("x", (g*calls+i)%3000)))
				resp, err := c.Echo(ctx, &testpb.EchoRequest{Payload: want})
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(resp.Payload, want) {
					errs <- fmt.Errorf("caller %d call %d got another call's response", g, i)
					return
				}
			}
		}()
	}
	// Meanwhile a slow call is in flight on the same connection and does
	// not hold the others up.
	r := e.svc.block("concurrent")
	blocked := make(chan error, 1)
	go func() { _, err := c.Block(ctx, &testpb.BlockRequest{Tag: "concurrent"}); blocked <- err }()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(r.release)
	if err := <-blocked; err != nil {
		t.Fatalf("Block: %v", err)
	}
	_ = cc
}

func (s *suite) testStatusCodes(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	for code := codes.Canceled; code <= codes.Unauthenticated; code++ {
		msg := "failing with " + code.String()
		_, err := c.Fail(ctx, &testpb.FailRequest{Code: uint32(code), Message: msg, Detail: "detail of " + code.String()})
		st, ok := status.FromError(err)
		if !ok || st.Code() != code || st.Message() != msg {
			t.Fatalf("Fail(%v): got %v", code, err)
		}
		d := st.Details()
		if len(d) != 1 {
			t.Fatalf("Fail(%v): %d details, want 1", code, len(d))
		}
		if sv, ok := d[0].(*wrapperspb.StringValue); !ok || sv.Value != "detail of "+code.String() {
			t.Fatalf("Fail(%v): detail %v", code, d[0])
		}
	}
	// Errors that are not status errors become Unknown; context errors
	// returned by handlers keep their meaning.
	if status.Code(errors.New("plain")) != codes.Unknown || status.Code(context.Canceled) != codes.Canceled {
		t.Fatal("status.Code mapping broke")
	}
}

func (s *suite) testUnimplemented(t *testing.T) {
	e := s.start(t)
	cc, _ := s.dial(t, e)
	ctx := s.ctx(t)
	var out testpb.EchoResponse
	err := cc.Invoke(ctx, "/rdmarpc.test.v1.Test/Nope", &testpb.EchoRequest{}, &out)
	wantCode(t, "unknown method", err, codes.Unimplemented, "unknown method Nope for service rdmarpc.test.v1.Test")
	err = cc.Invoke(ctx, "/no.Such/Service", &testpb.EchoRequest{}, &out)
	wantCode(t, "unknown service", err, codes.Unimplemented, "unknown service no.Such")
	err = cc.Invoke(ctx, "garbage", &testpb.EchoRequest{}, &out)
	wantCode(t, "malformed method", err, codes.Unimplemented, "malformed method name")
	if n := e.logs.FilterMessage("unknown method").Len(); n != 3 {
		t.Errorf("%d log lines for 3 unknown methods, want 3", n)
	}

	// A server whose implementation leaves a method to the embedded
	// UnimplementedTestServer answers Unimplemented for it.
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, struct{ testpb.UnimplementedTestServer }{})
	lis, err := s.cfg.Transport.Listen(s.cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-done }()
	cc2, err := rpc.Dial(ctx, lis.Addr().String(), rpc.WithTransport(s.cfg.Transport))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	_, err = testpb.NewTestClient(cc2).Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "method left to UnimplementedTestServer", err, codes.Unimplemented, "method Echo not implemented")
	// The connection still serves after the errors.
	if _, err := s.dialEcho(ctx, e); err != nil {
		t.Fatal(err)
	}
}

// dialEcho proves e still serves a new client.
func (s *suite) dialEcho(ctx context.Context, e *env) (*testpb.EchoResponse, error) {
	cc, err := rpc.Dial(ctx, e.addr, rpc.WithTransport(s.cfg.Transport))
	if err != nil {
		return nil, fmt.Errorf("a new client cannot connect: %w", err)
	}
	defer cc.Close()
	resp, err := testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{Payload: []byte("still serving")})
	if err != nil {
		return nil, fmt.Errorf("a new client's call fails: %w", err)
	}
	return resp, nil
}

func (s *suite) testDeadline(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	r := e.svc.block("deadline")
	const timeout = 300 * time.Millisecond
	before := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Block(cctx, &testpb.BlockRequest{Tag: "deadline"})
	wantCode(t, "Block past its deadline", err, codes.DeadlineExceeded, "")
	s.waitFor(t, "the handler to end", r.ended)
	if !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("the handler's context ended with %v, want DeadlineExceeded", r.err)
	}
	// The server rebuilt the deadline from the relative timeout: no
	// earlier than the client's, no later than the timeout after the
	// request arrived.
	if lo, hi := before.Add(timeout), r.startedAt.Add(timeout); r.deadline.Before(lo) || r.deadline.After(hi) {
		t.Fatalf("handler deadline %v, want within [%v, %v]", r.deadline, lo, hi)
	}
	// An expired context fails before anything is sent.
	_, err = c.Echo(cctx, &testpb.EchoRequest{})
	wantCode(t, "call with an expired context", err, codes.DeadlineExceeded, "")
}

func (s *suite) testCancel(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	r := e.svc.block("cancel")
	cctx, cancel := context.WithCancel(context.Background()) // no deadline
	done := make(chan error, 1)
	go func() { _, err := c.Block(cctx, &testpb.BlockRequest{Tag: "cancel"}); done <- err }()
	s.waitFor(t, "the handler to start", r.started)
	cancel()
	wantCode(t, "canceled call", <-done, codes.Canceled, "")
	// The cancel frame reaches the server and cancels the handler.
	s.waitFor(t, "the handler to see the cancellation", r.ended)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want Canceled", r.err)
	}
	if r.deadline != (time.Time{}) {
		t.Fatalf("handler had a deadline %v though the call had none", r.deadline)
	}
	// The connection goes on.
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// testSlotsFull: with every call slot taken and more calls waiting for one,
// the server still reads the connection: a CANCEL reaches a running
// handler, which frees its slot for a waiting call, and every call left
// succeeds once released.
func (s *suite) testSlotsFull(t *testing.T) {
	const slots, waiting = 2, 50
	e := s.start(t, rpc.MaxConcurrentCalls(slots))
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	victim := e.svc.block("victim")
	cctx, cancel := context.WithCancel(ctx)
	victimDone := make(chan error, 1)
	go func() { _, err := c.Block(cctx, &testpb.BlockRequest{Tag: "victim"}); victimDone <- err }()
	s.waitFor(t, "the first handler to start", victim.started)
	other := e.svc.block("other")
	errs := make(chan error, waiting+1)
	go func() { _, err := c.Block(ctx, &testpb.BlockRequest{Tag: "other"}); errs <- err }()
	s.waitFor(t, "the second handler to start", other.started)
	// Every slot is taken: these wait.
	for range waiting {
		go func() {
			_, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte("after")})
			errs <- err
		}()
	}
	cancel()
	wantCode(t, "cancelled call", <-victimDone, codes.Canceled, "")
	s.waitFor(t, "the cancelled handler to end", victim.ended)
	if !errors.Is(victim.err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want Canceled", victim.err)
	}
	close(other.release)
	for range waiting + 1 {
		if err := <-errs; err != nil {
			t.Fatalf("call: %v", err)
		}
	}
}

func (s *suite) testMetadata(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := metadata.AppendToOutgoingContext(s.ctx(t), "user", "ada", "user", "grace", "trace-bin", "\x00\x01")
	var header, trailer metadata.MD
	resp, err := c.Metadata(ctx, &testpb.MetadataRequest{}, rpc.Header(&header), rpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"trace-bin=\x00\x01", "user=ada", "user=grace"}
	if got := withoutParityKeys(resp.Entries); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("server saw metadata %q, want %q besides %v", resp.Entries, want, parityKeys)
	}
	if got := header.Get("echo-header-bin"); len(got) != 1 || got[0] != strings.Join(resp.Entries, ",") {
		t.Fatalf("response header %v", header)
	}
	if got := trailer.Get("echo-trailer"); len(got) != 1 || got[0] != fmt.Sprint(len(resp.Entries)) || trailer.Get("raw-bin")[0] != "\x00\x01\xff" {
		t.Fatalf("response trailer %v", trailer)
	}
	// Invalid metadata is refused before sending.
	bad := metadata.AppendToOutgoingContext(s.ctx(t), "Bad Key", "v")
	_, err = c.Metadata(bad, &testpb.MetadataRequest{})
	wantCode(t, "invalid metadata key", err, codes.Internal, "metadata key")
}

func (s *suite) testInterceptors(t *testing.T) {
	var (
		mu    sync.Mutex
		trace []string
	)
	record := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }
	srvI := func(name string) rpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
			record("server " + name + " before " + info.FullMethod)
			resp, err := h(ctx, req)
			record("server " + name + " after")
			return resp, err
		}
	}
	cliI := func(name string) rpc.UnaryClientInterceptor {
		return func(ctx context.Context, method string, req, reply any, cc *rpc.ClientConn, inv rpc.UnaryInvoker, opts ...rpc.CallOption) error {
			record("client " + name + " before")
			err := inv(ctx, method, req, reply, cc, opts...)
			record("client " + name + " after")
			return err
		}
	}
	// An interceptor that refuses calls without credentials.
	auth := func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
		if len(metadata.ValueFromIncomingContext(ctx, "authorization")) == 0 {
			return nil, status.Error(codes.Unauthenticated, "no credentials")
		}
		return h(ctx, req)
	}
	e := s.start(t, rpc.UnaryInterceptor(srvI("A"), srvI("B")), rpc.UnaryInterceptor(auth))
	addAuth := func(ctx context.Context, method string, req, reply any, cc *rpc.ClientConn, inv rpc.UnaryInvoker, opts ...rpc.CallOption) error {
		return inv(metadata.AppendToOutgoingContext(ctx, "authorization", "yes"), method, req, reply, cc, opts...)
	}
	_, c := s.dial(t, e, rpc.WithUnaryInterceptor(cliI("X"), cliI("Y"), addAuth))
	ctx := s.ctx(t)
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"client X before", "client Y before",
		"server A before /rdmarpc.test.v1.Test/Echo", "server B before /rdmarpc.test.v1.Test/Echo",
		"server B after", "server A after",
		"client Y after", "client X after",
	}
	if fmt.Sprint(trace) != fmt.Sprint(want) {
		t.Fatalf("interceptor order:\n got %q\nwant %q", trace, want)
	}
	_, c2 := s.dial(t, e)
	_, err := c2.Echo(ctx, &testpb.EchoRequest{})
	wantCode(t, "call refused by an interceptor", err, codes.Unauthenticated, "no credentials")
}

func (s *suite) testMessageSizes(t *testing.T) {
	e := s.start(t, rpc.MaxRecvMsgSize(64<<10))
	_, c := s.dial(t, e, rpc.WithMaxRecvMsgSize(32<<10))
	ctx := s.ctx(t)
	_, err := c.Echo(ctx, &testpb.EchoRequest{Payload: make([]byte, 100<<10)})
	wantCode(t, "request over the server's limit", err, codes.ResourceExhausted, "larger than the limit")
	_, err = c.Echo(ctx, &testpb.EchoRequest{ReplySize: 40 << 10})
	wantCode(t, "response over the client's limit", err, codes.ResourceExhausted, "larger than the limit")
	_, err = c.Echo(ctx, &testpb.EchoRequest{ReplySize: 40 << 10}, rpc.MaxCallRecvMsgSize(64<<10))
	if err != nil {
		t.Fatalf("response under a per-call limit: %v", err)
	}
	_, err = c.Echo(ctx, &testpb.EchoRequest{Payload: make([]byte, 2000)}, rpc.MaxCallSendMsgSize(1000))
	wantCode(t, "request over the per-call send limit", err, codes.ResourceExhausted, "larger than the limit")
	// None of that broke the connection.
	if _, err := c.Echo(ctx, &testpb.EchoRequest{Payload: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testPanic(t *testing.T) {
	e := s.start(t)
	_, c := s.dial(t, e)
	ctx := s.ctx(t)
	_, err := c.Panic(ctx, &testpb.PanicRequest{})
	wantCode(t, "handler panic", err, codes.Internal, "panicked")
	if n := e.logs.FilterMessage("handler panicked").Len(); n != 1 {
		t.Fatalf("%d log lines for one panic, want 1", n)
	}
	if _, err := c.Echo(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatalf("after a panic on the same connection: %v", err)
	}
	if _, err := s.dialEcho(ctx, e); err != nil {
		t.Fatal(err)
	}
}

// testClientVanishes: a client that closes mid-call cancels the handler,
// and the server goes on serving others.
func (s *suite) testClientVanishes(t *testing.T) {
	e := s.start(t)
	cc, c := s.dial(t, e)
	ctx := s.ctx(t)
	r := e.svc.block("vanish")
	done := make(chan error, 1)
	go func() { _, err := c.Block(ctx, &testpb.BlockRequest{Tag: "vanish"}); done <- err }()
	s.waitFor(t, "the handler to start", r.started)
	cc.Close()
	wantCode(t, "call pending at Close", <-done, codes.Canceled, "closing")
	s.waitFor(t, "the handler to be canceled", r.ended)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want Canceled", r.err)
	}
	if _, err := s.dialEcho(ctx, e); err != nil {
		t.Fatal(err)
	}
}
