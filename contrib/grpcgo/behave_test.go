package grpcgo_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	gcodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	gmetadata "google.golang.org/grpc/metadata"
	gstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/contrib/grpcgo"
	_ "github.com/rdmarpc/rdmarpc/encoding/gzip" // the rdmarpc client advertises gzip, as gRPC-go's does with its own
	"github.com/rdmarpc/rdmarpc/rpc"
)

// The parity tests: each behaviour is one test body written against
// gRPC-go's API, run against a gRPC-go server and client and against an
// rdmarpc server and client (through this package), both over loopback
// TCP. Where rdmarpc differed, the rdmarpc half failed before the change
// its commit names.

// serverOpts are the server options a case needs, for either library.
type serverOpts struct {
	maxSendMsgSize  int
	waitForHandlers bool
	unknown         grpc.StreamHandler
	// record, when set, gets a line from each interceptor the server and
	// the client run: "server unary /m", "client stream /m", ...
	record func(string)
	// The client's: a default service config, WithMaxCallAttempts (0:
	// not given) and WithDisableRetry.
	serviceConfig   string
	maxCallAttempts int
	disableRetry    bool
}

// started is a server under test and a client of it.
type started struct {
	cc   grpc.ClientConnInterface
	stop func() // Server.Stop; the test's cleanup calls it again
}

type side struct {
	name  string
	start func(t *testing.T, o serverOpts, desc *grpc.ServiceDesc) started
}

var sides = []side{
	{"grpc-go", startGRPC},
	{"rdmarpc", startRdmarpc},
}

func startGRPC(t *testing.T, o serverOpts, desc *grpc.ServiceDesc) started {
	t.Helper()
	var opts []grpc.ServerOption
	if o.maxSendMsgSize > 0 {
		opts = append(opts, grpc.MaxSendMsgSize(o.maxSendMsgSize))
	}
	if o.waitForHandlers {
		opts = append(opts, grpc.WaitForHandlers(true))
	}
	if o.unknown != nil {
		opts = append(opts, grpc.UnknownServiceHandler(o.unknown))
	}
	var dialOpts []grpc.DialOption
	if r := o.record; r != nil {
		opts = append(opts,
			grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				r("server unary " + info.FullMethod)
				return h(ctx, req)
			}),
			grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				r("server stream " + info.FullMethod)
				return h(srv, ss)
			}))
		dialOpts = append(dialOpts,
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				r("client unary " + method)
				return inv(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				r("client stream " + method)
				return st(ctx, desc, cc, method, opts...)
			}))
	}
	if o.serviceConfig != "" {
		dialOpts = append(dialOpts, grpc.WithDefaultServiceConfig(o.serviceConfig))
	}
	if o.maxCallAttempts > 0 {
		dialOpts = append(dialOpts, grpc.WithMaxCallAttempts(o.maxCallAttempts))
	}
	if o.disableRetry {
		dialOpts = append(dialOpts, grpc.WithDisableRetry())
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(desc, struct{}{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		s.Stop()
		<-done
	})
	return started{cc: cc, stop: s.Stop}
}

func startRdmarpc(t *testing.T, o serverOpts, desc *grpc.ServiceDesc) started {
	t.Helper()
	var opts []rpc.ServerOption
	if o.maxSendMsgSize > 0 {
		opts = append(opts, rpc.MaxSendMsgSize(o.maxSendMsgSize))
	}
	if o.waitForHandlers {
		opts = append(opts, rpc.WaitForHandlers(true))
	}
	if o.unknown != nil {
		opts = append(opts, rpc.UnknownServiceHandler(grpcgo.StreamHandler(o.unknown)))
	}
	var dialOpts []rpc.DialOption
	if r := o.record; r != nil {
		opts = append(opts,
			rpc.UnaryInterceptor(func(ctx context.Context, req any, info *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
				r("server unary " + info.FullMethod)
				return h(ctx, req)
			}),
			rpc.StreamInterceptor(func(srv any, ss rpc.ServerStream, info *rpc.StreamServerInfo, h rpc.StreamHandler) error {
				r("server stream " + info.FullMethod)
				return h(srv, ss)
			}))
		dialOpts = append(dialOpts,
			rpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *rpc.ClientConn, inv rpc.UnaryInvoker, opts ...rpc.CallOption) error {
				r("client unary " + method)
				return inv(ctx, method, req, reply, cc, opts...)
			}),
			rpc.WithStreamInterceptor(func(ctx context.Context, desc *rpc.StreamDesc, cc *rpc.ClientConn, method string, st rpc.Streamer, opts ...rpc.CallOption) (rpc.ClientStream, error) {
				r("client stream " + method)
				return st(ctx, desc, cc, method, opts...)
			}))
	}
	if o.serviceConfig != "" {
		dialOpts = append(dialOpts, rpc.WithDefaultServiceConfig(o.serviceConfig))
	}
	if o.maxCallAttempts > 0 {
		dialOpts = append(dialOpts, rpc.WithMaxCallAttempts(o.maxCallAttempts))
	}
	if o.disableRetry {
		dialOpts = append(dialOpts, rpc.WithDisableRetry())
	}
	lis, err := rpc.Listen(tcp)
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(opts...)
	grpcgo.NewServer(s).RegisterService(desc, struct{}{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	cc, err := rpc.NewClient("tcp://"+lis.Addr().String(), dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		s.Stop()
		<-done
	})
	return started{cc: grpcgo.NewClient(cc), stop: s.Stop}
}

// handlers are a case's methods of the service behave.Svc; nil ones are
// not registered.
type handlers struct {
	unary        func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	serverStream func(in *wrapperspb.StringValue, ss grpc.ServerStream) error
	clientStream func(ss grpc.ServerStream) error
}

func (h handlers) desc() *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: "behave.Svc", HandlerType: (*any)(nil)}
	if h.unary != nil {
		d.Methods = append(d.Methods, grpc.MethodDesc{MethodName: "Unary",
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				if ic == nil {
					return h.unary(ctx, in)
				}
				info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/behave.Svc/Unary"}
				return ic(ctx, in, info, func(ctx context.Context, req any) (any, error) {
					return h.unary(ctx, req.(*wrapperspb.StringValue))
				})
			}})
	}
	if h.serverStream != nil {
		d.Streams = append(d.Streams, grpc.StreamDesc{StreamName: "ServerStream", ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				return h.serverStream(in, ss)
			}})
	}
	if h.clientStream != nil {
		d.Streams = append(d.Streams, grpc.StreamDesc{StreamName: "ClientStream", ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error { return h.clientStream(ss) }})
	}
	return d
}

// parity runs body against each side.
func parity(t *testing.T, o serverOpts, h handlers, body func(t *testing.T, s started)) {
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			body(t, sd.start(t, o, h.desc()))
		})
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestBehaveEchoIncomingMetadata: a handler that sets the incoming
// metadata, pseudo-headers and reserved keys included, as its headers and
// trailers (as gRPC-go's own test server does) succeeds; the keys of its
// own reach the client.
func TestBehaveEchoIncomingMetadata(t *testing.T) {
	echo := func(ctx context.Context) error {
		md, _ := gmetadata.FromIncomingContext(ctx)
		if err := grpc.SetHeader(ctx, md); err != nil {
			return err
		}
		if err := grpc.SendHeader(ctx, md); err != nil {
			return err
		}
		return grpc.SetTrailer(ctx, md)
	}
	h := handlers{
		unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return in, echo(ctx)
		},
		serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
			md, _ := gmetadata.FromIncomingContext(ss.Context())
			if err := ss.SetHeader(md); err != nil {
				return err
			}
			if err := ss.SendHeader(md); err != nil {
				return err
			}
			ss.SetTrailer(md)
			return ss.SendMsg(in)
		},
	}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		ctx := gmetadata.AppendToOutgoingContext(ctxOf(t), "echo-me", "1")
		var header, trailer gmetadata.MD
		out := new(wrapperspb.StringValue)
		if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", wrapperspb.String("x"), out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("unary: %v", err)
		}
		if header.Get("echo-me")[0] != "1" || trailer.Get("echo-me")[0] != "1" {
			t.Errorf("unary: header %v, trailer %v; want echo-me in both", header, trailer)
		}
		cs, err := s.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/behave.Svc/ServerStream")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		for err == nil {
			err = cs.RecvMsg(out)
		}
		if err != io.EOF {
			t.Fatalf("stream: %v", err)
		}
		// SetHeader and SendHeader both add the echo: it is there twice.
		if h, _ := cs.Header(); len(h.Get("echo-me")) == 0 || len(cs.Trailer().Get("echo-me")) != 1 {
			t.Errorf("stream: header %v, trailer %v; want echo-me in both", h, cs.Trailer())
		}
	})
}

// TestBehaveInvalidUTF8Status: a status message that is not valid UTF-8
// reaches the client with each bad byte as U+FFFD.
func TestBehaveInvalidUTF8Status(t *testing.T) {
	h := handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, gstatus.Error(gcodes.Internal, "bad \xff byte")
	}}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		err := s.cc.Invoke(ctxOf(t), "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue))
		st := gstatus.Convert(err)
		if st.Code() != gcodes.Internal || st.Message() != "bad \uFFFD byte" {
			t.Errorf("got %v %q, want Internal %q", st.Code(), st.Message(), "bad \uFFFD byte")
		}
	})
}

// TestBehaveSendMsgFailureEndsRPC: a server SendMsg over MaxSendMsgSize
// ends the RPC with its status at once, while the handler still runs;
// what the handler returns later is ignored.
func TestBehaveSendMsgFailureEndsRPC(t *testing.T) {
	release := make(chan struct{})
	sendCode := make(chan gcodes.Code, 1) // what the handler's SendMsg returned
	h := handlers{serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		sendCode <- gstatus.Code(ss.SendMsg(wrapperspb.String(strings.Repeat("x", 4096))))
		<-release
		return gstatus.Error(gcodes.Aborted, "the handler's own return")
	}}
	parity(t, serverOpts{maxSendMsgSize: 1024}, h, func(t *testing.T, s started) {
		defer func() { release <- struct{}{} }()
		cs, err := s.cc.NewStream(ctxOf(t), &grpc.StreamDesc{ServerStreams: true}, "/behave.Svc/ServerStream")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		// The handler has not returned: the status is SendMsg's.
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); gstatus.Code(err) != gcodes.ResourceExhausted {
			t.Errorf("RecvMsg: %v, want ResourceExhausted while the handler still runs", err)
		}
		// The client can see the status before the handler's SendMsg
		// returned: wait for it.
		if c := <-sendCode; c != gcodes.ResourceExhausted {
			t.Errorf("the handler's SendMsg: %v, want ResourceExhausted", c)
		}
	})
}

// TestBehaveUnaryThroughNewStream: a unary method answers a stream
// opened on it with NewStream: one response, then io.EOF.
func TestBehaveUnaryThroughNewStream(t *testing.T) {
	h := handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String(in.Value + "!"), nil
	}}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		cs, err := s.cc.NewStream(ctxOf(t), &grpc.StreamDesc{}, "/behave.Svc/Unary")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("hi")); err != nil {
			t.Fatal(err)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		out := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(out); err != nil || out.Value != "hi!" {
			t.Fatalf("RecvMsg: %q, %v", out.Value, err)
		}
		if err := cs.RecvMsg(out); err != io.EOF {
			t.Errorf("second RecvMsg: %v, want io.EOF", err)
		}
	})
}

// TestBehaveCardinality: a client-streaming handler that returns without
// a response gives the client Internal; a second SendMsg on a stream that
// is not client-streaming fails Internal.
func TestBehaveCardinality(t *testing.T) {
	h := handlers{
		clientStream: func(ss grpc.ServerStream) error {
			for {
				if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
					if err == io.EOF {
						return nil // no response
					}
					return err
				}
			}
		},
		serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error { return ss.SendMsg(in) },
	}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		ctx := ctxOf(t)
		cs, err := s.cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/behave.Svc/ClientStream")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); gstatus.Code(err) != gcodes.Internal {
			t.Errorf("client-streaming handler without a response: %v, want Internal", err)
		}

		cs, err = s.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/behave.Svc/ServerStream")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("y")); gstatus.Code(err) != gcodes.Internal {
			t.Errorf("second SendMsg on a server-streaming stream: %v, want Internal", err)
		}
	})
}

// blockingHandler is a unary handler that reports its start, waits for its
// context to end, then for release (or, should nobody release it, a
// minute: then stuck is set), and sets returned before it returns.
type blockingHandler struct {
	started, cancelled, release chan struct{}
	stuck, returned             atomic.Bool
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{started: make(chan struct{}), cancelled: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingHandler) handlers() handlers {
	return handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(b.started)
		<-ctx.Done()
		close(b.cancelled)
		select {
		case <-b.release:
		case <-time.After(time.Minute):
			b.stuck.Store(true)
		}
		b.returned.Store(true)
		return in, nil
	}}
}

// call makes the call the handler blocks, on a goroutine whose end the
// returned channel reports.
func (b *blockingHandler) call(t *testing.T, s started) chan error {
	done := make(chan error, 1)
	go func() {
		done <- s.cc.Invoke(ctxOf(t), "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue))
	}()
	<-b.started
	return done
}

// TestBehaveStopDoesNotWaitForHandlers: Stop cancels the running
// handlers' contexts and returns without waiting for them.
func TestBehaveStopDoesNotWaitForHandlers(t *testing.T) {
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			b := newBlockingHandler()
			s := sd.start(t, serverOpts{}, b.handlers().desc())
			done := b.call(t, s)
			s.stop() // the handler is released only after this returns
			<-b.cancelled
			returned := b.returned.Load()
			close(b.release)
			if err := <-done; err == nil {
				t.Error("the call succeeded through Stop")
			}
			if returned || b.stuck.Load() {
				t.Errorf("Stop returned after the handler (stuck %v): it waited for it", b.stuck.Load())
			}
		})
	}
}

// TestBehaveWaitForHandlers: with WaitForHandlers(true), Stop cancels the
// handlers' contexts and returns once they have returned.
func TestBehaveWaitForHandlers(t *testing.T) {
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			b := newBlockingHandler()
			s := sd.start(t, serverOpts{waitForHandlers: true}, b.handlers().desc())
			done := b.call(t, s)
			stopped := make(chan bool, 1)
			go func() {
				s.stop()
				stopped <- b.returned.Load()
			}()
			<-b.cancelled
			close(b.release)
			if !<-stopped {
				t.Error("Stop returned before the handler did")
			}
			<-done
		})
	}
}

// TestBehaveUnknownServiceHandler: UnknownServiceHandler serves calls to
// methods nobody registered, unary and streaming, and names the method.
func TestBehaveUnknownServiceHandler(t *testing.T) {
	unknown := func(srv any, ss grpc.ServerStream) error {
		m, ok := grpc.MethodFromServerStream(ss)
		if !ok {
			return gstatus.Error(gcodes.Internal, "no method")
		}
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		return ss.SendMsg(wrapperspb.String(m + " " + in.Value))
	}
	h := handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil }}
	parity(t, serverOpts{unknown: unknown}, h, func(t *testing.T, s started) {
		ctx := ctxOf(t)
		out := new(wrapperspb.StringValue)
		for _, method := range []string{"/nowhere.Svc/M", "/behave.Svc/Missing"} {
			if err := s.cc.Invoke(ctx, method, wrapperspb.String("x"), out); err != nil || out.Value != method+" x" {
				t.Errorf("Invoke %s: %q, %v", method, out.Value, err)
			}
		}
		if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", wrapperspb.String("x"), out); err != nil || out.Value != "x" {
			t.Errorf("a registered method: %q, %v", out.Value, err)
		}
		cs, err := s.cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/nowhere.Svc/S")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("y")); err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(out); err != nil || out.Value != "/nowhere.Svc/S y" {
			t.Errorf("stream: %q, %v", out.Value, err)
		}
		cs.CloseSend()
		if err := cs.RecvMsg(out); err != io.EOF {
			t.Errorf("end of stream: %v", err)
		}
	})
}

// userCallOption and userServerOption are options users write, as gRPC-go
// lets them, by embedding the empty ones (an interceptor may look for
// them).
type userCallOption struct {
	grpc.EmptyCallOption
	tag string
}

type userServerOption struct {
	rpc.EmptyServerOption
}

type userGRPCServerOption struct {
	grpc.EmptyServerOption
}

// TestBehaveEmptyOptions: a call option and a server option that embed
// EmptyCallOption and EmptyServerOption are taken, and do nothing.
func TestBehaveEmptyOptions(t *testing.T) {
	h := handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil }}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		out := new(wrapperspb.StringValue)
		if err := s.cc.Invoke(ctxOf(t), "/behave.Svc/Unary", wrapperspb.String("x"), out, userCallOption{tag: "t"}); err != nil || out.Value != "x" {
			t.Errorf("Invoke with a user's call option: %q, %v", out.Value, err)
		}
	})
	// The server options, each library's own.
	grpc.NewServer(userGRPCServerOption{}).Stop()
	rpc.NewServer(userServerOption{}).Stop()
}

// TestBehaveCompression: UseCompressor("gzip") compresses the request
// (1 MiB of zeros passes a 64 KiB send limit) and the response comes back
// whole; a compressor nobody registered fails the call Internal before it
// leaves.
func TestBehaveCompression(t *testing.T) {
	h := handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil }}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		ctx := ctxOf(t)
		big := wrapperspb.String(strings.Repeat("\x00", 1<<20))
		out := new(wrapperspb.StringValue)
		if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", big, out, grpc.MaxCallSendMsgSize(64<<10)); gstatus.Code(err) != gcodes.ResourceExhausted {
			t.Errorf("uncompressed under the limit: %v, want ResourceExhausted", err)
		}
		if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", big, out, grpc.MaxCallSendMsgSize(64<<10), grpc.UseCompressor("gzip")); err != nil || out.Value != big.Value {
			t.Errorf("compressed: %d bytes back, %v", len(out.Value), err)
		}
		if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", big, out, grpc.UseCompressor("snappy")); gstatus.Code(err) != gcodes.Internal {
			t.Errorf("UseCompressor(snappy): %v, want Internal", err)
		}
	})
}

// TestBehaveInvalidHandlerMetadata: a header with a key that is not valid
// metadata, set by a handler, ends the call with Internal.
func TestBehaveInvalidHandlerMetadata(t *testing.T) {
	h := handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if err := grpc.SetHeader(ctx, gmetadata.MD{"bad key": {"v"}}); err != nil {
			return nil, err
		}
		return in, nil
	}}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		err := s.cc.Invoke(ctxOf(t), "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue))
		if gstatus.Code(err) != gcodes.Internal {
			t.Errorf("got %v, want Internal", err)
		}
	})
}

// TestBehaveResponseContentType: the response headers a client sees carry
// content-type application/grpc, unary and streaming.
func TestBehaveResponseContentType(t *testing.T) {
	h := handlers{
		unary:        func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil },
		serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error { return ss.SendMsg(in) },
	}
	parity(t, serverOpts{}, h, func(t *testing.T, s started) {
		ctx := ctxOf(t)
		var header gmetadata.MD
		if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Header(&header)); err != nil {
			t.Fatal(err)
		}
		if v := header.Get("content-type"); len(v) != 1 || v[0] != "application/grpc" {
			t.Errorf("unary: content-type %q, want application/grpc", v)
		}
		cs, err := s.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/behave.Svc/ServerStream")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
		if h, err := cs.Header(); err != nil || len(h.Get("content-type")) != 1 || h.Get("content-type")[0] != "application/grpc" {
			t.Errorf("stream: content-type %q, %v; want application/grpc", h.Get("content-type"), err)
		}
	})
}

// interceptorLog is the lines a case's interceptors recorded.
type interceptorLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *interceptorLog) record(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

// take returns the lines so far and forgets them.
func (l *interceptorLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// TestBehaveInterceptorKinds: which interceptors run for each way of
// calling. A unary method opened with NewStream runs the client's stream
// interceptor and the server's unary one (the server serves the method it
// has, as it has it); a method only UnknownServiceHandler serves runs the
// server's stream interceptor, whether called unary or as a stream.
func TestBehaveInterceptorKinds(t *testing.T) {
	h := handlers{
		unary:        func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil },
		serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error { return ss.SendMsg(in) },
	}
	unknown := func(srv any, ss grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		return ss.SendMsg(in)
	}
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			var log interceptorLog
			s := sd.start(t, serverOpts{record: log.record, unknown: unknown}, h.desc())
			ctx := ctxOf(t)
			// stream opens a stream on method, sends one message and reads
			// to the end.
			stream := func(method string, desc *grpc.StreamDesc) {
				cs, err := s.cc.NewStream(ctx, desc, method)
				if err != nil {
					t.Fatal(err)
				}
				if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
					t.Fatal(err)
				}
				cs.CloseSend()
				for err == nil {
					err = cs.RecvMsg(new(wrapperspb.StringValue))
				}
				if err != io.EOF {
					t.Fatalf("%s: %v", method, err)
				}
			}
			for _, c := range []struct {
				name string
				call func()
				want []string
			}{
				{"Invoke unary", func() {
					if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue)); err != nil {
						t.Fatal(err)
					}
				}, []string{"client unary /behave.Svc/Unary", "server unary /behave.Svc/Unary"}},
				{"NewStream on unary", func() { stream("/behave.Svc/Unary", &grpc.StreamDesc{}) },
					[]string{"client stream /behave.Svc/Unary", "server unary /behave.Svc/Unary"}},
				{"NewStream on server-streaming", func() { stream("/behave.Svc/ServerStream", &grpc.StreamDesc{ServerStreams: true}) },
					[]string{"client stream /behave.Svc/ServerStream", "server stream /behave.Svc/ServerStream"}},
				{"Invoke unknown", func() {
					if err := s.cc.Invoke(ctx, "/nowhere.Svc/M", wrapperspb.String("x"), new(wrapperspb.StringValue)); err != nil {
						t.Fatal(err)
					}
				}, []string{"client unary /nowhere.Svc/M", "server stream /nowhere.Svc/M"}},
				{"NewStream unknown", func() { stream("/nowhere.Svc/S", &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}) },
					[]string{"client stream /nowhere.Svc/S", "server stream /nowhere.Svc/S"}},
			} {
				c.call()
				// The server's interceptor ran before the client saw the
				// end of the call: the lines are all there.
				if got := log.take(); !slices.Equal(got, c.want) {
					t.Errorf("%s: interceptors %q, want %q", c.name, got, c.want)
				}
			}
		})
	}
}

// sendCompressor is each side's SetSendCompressor and
// ClientSupportedCompressors: gRPC-go's work only on its own server's
// streams, so a handler calls its server's.
var sendCompressor = map[string]struct {
	set       func(ctx context.Context, name string) error
	supported func(ctx context.Context) ([]string, error)
}{
	"grpc-go": {grpc.SetSendCompressor, grpc.ClientSupportedCompressors},
	"rdmarpc": {rpc.SetSendCompressor, rpc.ClientSupportedCompressors},
}

// TestBehaveSetSendCompressor: a handler picks its responses' compressor
// among those the client advertised (a client advertises what its process
// registered, gzip here), whatever the request's: a 1 MiB response of
// zeros passes a 64 KiB server send limit only compressed. An unregistered
// name, or one after the header went, is refused.
func TestBehaveSetSendCompressor(t *testing.T) {
	big := strings.Repeat("\x00", 1<<20)
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			sc := sendCompressor[sd.name]
			// The request names the compressor the handler sets ("" for
			// none); a refusal is FailedPrecondition with its reason.
			choose := func(ctx context.Context, name string) error {
				if name == "" {
					return nil
				}
				if err := sc.set(ctx, name); err != nil {
					return gstatus.Error(gcodes.FailedPrecondition, err.Error())
				}
				return nil
			}
			h := handlers{
				unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
					if in.Value == "supported" {
						names, err := sc.supported(ctx)
						return wrapperspb.String(strings.Join(names, ",")), err
					}
					if err := choose(ctx, in.Value); err != nil {
						return nil, err
					}
					return wrapperspb.String(big), nil
				},
				serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
					if err := choose(ss.Context(), in.Value); err != nil {
						return err
					}
					if err := ss.SendMsg(wrapperspb.String(big)); err != nil {
						return err
					}
					// The header went with the message: too late now.
					if err := sc.set(ss.Context(), "gzip"); err == nil {
						return gstatus.Error(gcodes.Internal, "SetSendCompressor after the header succeeded")
					}
					return nil
				},
			}
			s := sd.start(t, serverOpts{maxSendMsgSize: 64 << 10}, h.desc())
			ctx := ctxOf(t)
			unary := func(choice string, opts ...grpc.CallOption) error {
				out := new(wrapperspb.StringValue)
				err := s.cc.Invoke(ctx, "/behave.Svc/Unary", wrapperspb.String(choice), out, opts...)
				if err == nil && out.Value != big {
					t.Errorf("%q: %d bytes back, want %d", choice, len(out.Value), len(big))
				}
				return err
			}
			out := new(wrapperspb.StringValue)
			if err := s.cc.Invoke(ctx, "/behave.Svc/Unary", wrapperspb.String("supported"), out); err != nil || !slices.Contains(strings.Split(out.Value, ","), "gzip") {
				t.Errorf("ClientSupportedCompressors: %q, %v; want gzip among them", out.Value, err)
			}
			if err := unary(""); gstatus.Code(err) != gcodes.ResourceExhausted {
				t.Errorf("no compressor: %v, want ResourceExhausted", err)
			}
			if err := unary("gzip"); err != nil {
				t.Errorf("SetSendCompressor(gzip) on a plain request: %v", err)
			}
			if err := unary("identity", grpc.UseCompressor("gzip")); gstatus.Code(err) != gcodes.ResourceExhausted {
				t.Errorf("SetSendCompressor(identity) on a gzip request: %v, want ResourceExhausted", err)
			}
			if err := unary("", grpc.UseCompressor("gzip")); err != nil {
				t.Errorf("a gzip request answered in kind: %v", err)
			}
			if err := unary("snappy"); gstatus.Code(err) != gcodes.FailedPrecondition {
				t.Errorf("SetSendCompressor(snappy): %v, want the handler's FailedPrecondition", err)
			}
			cs, err := s.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/behave.Svc/ServerStream")
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(wrapperspb.String("gzip")); err != nil {
				t.Fatal(err)
			}
			cs.CloseSend()
			for err == nil {
				err = cs.RecvMsg(out)
			}
			if err != io.EOF {
				t.Errorf("stream with SetSendCompressor(gzip): %v", err)
			}
		})
	}
}

// retryConfig retries behave.Svc's methods on Unavailable up to
// maxAttempts, after a backoff of backoff seconds (before jitter).
func retryConfig(maxAttempts int, backoff string) string {
	return `{"methodConfig": [{"name": [{"service": "behave.Svc"}], "retryPolicy": {
		"maxAttempts": ` + fmt.Sprint(maxAttempts) + `, "initialBackoff": "` + backoff + `s", "maxBackoff": "` + backoff + `s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
}

// failing is a unary handler that fails Unavailable, with trailer
// grpc-retry-pushback-ms set to pushback unless it is "", until it has
// run failures times, and counts its runs.
func failing(failures int32, pushback string, runs *atomic.Int32) handlers {
	return handlers{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if runs.Add(1) > failures {
			return in, nil
		}
		if pushback != "" {
			grpc.SetTrailer(ctx, gmetadata.Pairs("grpc-retry-pushback-ms", pushback))
		}
		return nil, gstatus.Error(gcodes.Unavailable, "not yet")
	}}
}

// TestBehaveRetryPushback: the server's grpc-retry-pushback-ms (gRFC A6)
// decides the retry: a negative or malformed value stops retrying, a
// positive one is the delay (the policy's backoff, 1000 s, would outlast
// the test's minute).
func TestBehaveRetryPushback(t *testing.T) {
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			for _, c := range []struct {
				pushback string
				wantRuns int32
				wantCode gcodes.Code
			}{
				{"-1", 1, gcodes.Unavailable},
				{"soon", 1, gcodes.Unavailable},
				{"1", 2, gcodes.OK},
			} {
				var runs atomic.Int32
				s := sd.start(t, serverOpts{serviceConfig: retryConfig(4, "1000")}, failing(1, c.pushback, &runs).desc())
				err := s.cc.Invoke(ctxOf(t), "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue))
				if gstatus.Code(err) != c.wantCode || runs.Load() != c.wantRuns {
					t.Errorf("pushback %q: %v after %d runs, want %v after %d", c.pushback, err, runs.Load(), c.wantCode, c.wantRuns)
				}
			}
		})
	}
}

// TestBehaveRetryAttempts: how many attempts a call that always fails
// makes: the service config's maxAttempts (10) capped by
// WithMaxCallAttempts (default 5), one with WithDisableRetry.
func TestBehaveRetryAttempts(t *testing.T) {
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			for _, c := range []struct {
				o        serverOpts
				wantRuns int32
			}{
				{serverOpts{}, 5},
				{serverOpts{maxCallAttempts: 7}, 7},
				{serverOpts{maxCallAttempts: 2}, 2},
				{serverOpts{disableRetry: true}, 1},
			} {
				var runs atomic.Int32
				c.o.serviceConfig = retryConfig(10, "0.001")
				s := sd.start(t, c.o, failing(100, "", &runs).desc())
				err := s.cc.Invoke(ctxOf(t), "/behave.Svc/Unary", wrapperspb.String("x"), new(wrapperspb.StringValue))
				if gstatus.Code(err) != gcodes.Unavailable || runs.Load() != c.wantRuns {
					t.Errorf("%+v: %v after %d runs, want Unavailable after %d", c.o, err, runs.Load(), c.wantRuns)
				}
			}
		})
	}
}

// TestBehaveRetryContextCommits: a stream whose first attempt fails
// Unavailable before any response is retried, unless the caller asked for
// its Context first: that commits the stream to the attempt.
func TestBehaveRetryContextCommits(t *testing.T) {
	for _, sd := range sides {
		t.Run(sd.name, func(t *testing.T) {
			for _, askContext := range []bool{false, true} {
				var runs atomic.Int32
				h := handlers{serverStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
					if runs.Add(1) == 1 {
						return gstatus.Error(gcodes.Unavailable, "not yet")
					}
					return ss.SendMsg(in)
				}}
				s := sd.start(t, serverOpts{serviceConfig: retryConfig(4, "0.001")}, h.desc())
				cs, err := s.cc.NewStream(ctxOf(t), &grpc.StreamDesc{ServerStreams: true}, "/behave.Svc/ServerStream")
				if err != nil {
					t.Fatal(err)
				}
				if err := cs.SendMsg(wrapperspb.String("x")); err != nil {
					t.Fatal(err)
				}
				if err := cs.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if askContext {
					_ = cs.Context()
				}
				err = cs.RecvMsg(new(wrapperspb.StringValue))
				want, wantRuns := gcodes.OK, int32(2)
				if askContext {
					want, wantRuns = gcodes.Unavailable, 1
				}
				if gstatus.Code(err) != want || runs.Load() != wantRuns {
					t.Errorf("Context asked %v: %v after %d runs, want %v after %d", askContext, err, runs.Load(), want, wantRuns)
				}
			}
		})
	}
}
