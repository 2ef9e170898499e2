package grpc_test

// A greeter written as against gRPC-go (its helloworld example's client and
// server, and stubs in protoc-gen-go-grpc's shape), with the imports changed
// by the port rule and nothing else: no transport import, so the tcp
// transport comes from package grpc.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
	"github.com/rdmarpc/rdmarpc/grpc"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The stubs, in the shape protoc-gen-go-grpc (version 9) generates.

const _ = grpc.SupportPackageIsVersion9

const (
	Greeter_SayHello_FullMethodName      = "/helloworld.Greeter/SayHello"
	Greeter_SayHelloAgain_FullMethodName = "/helloworld.Greeter/SayHelloAgain"
)

type GreeterClient interface {
	SayHello(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (*wrapperspb.StringValue, error)
	SayHelloAgain(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (grpc.ServerStreamingClient[wrapperspb.StringValue], error)
}

type greeterClient struct{ cc grpc.ClientConnInterface }

func NewGreeterClient(cc grpc.ClientConnInterface) GreeterClient { return &greeterClient{cc} }

func (c *greeterClient) SayHello(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (*wrapperspb.StringValue, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(wrapperspb.StringValue)
	if err := c.cc.Invoke(ctx, Greeter_SayHello_FullMethodName, in, out, cOpts...); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *greeterClient) SayHelloAgain(ctx context.Context, in *wrapperspb.StringValue, opts ...grpc.CallOption) (grpc.ServerStreamingClient[wrapperspb.StringValue], error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	stream, err := c.cc.NewStream(ctx, &Greeter_ServiceDesc.Streams[0], Greeter_SayHelloAgain_FullMethodName, cOpts...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[wrapperspb.StringValue, wrapperspb.StringValue]{ClientStream: stream}
	if err := x.ClientStream.SendMsg(in); err != nil {
		return nil, err
	}
	if err := x.ClientStream.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}

type GreeterServer interface {
	SayHello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	SayHelloAgain(*wrapperspb.StringValue, grpc.ServerStreamingServer[wrapperspb.StringValue]) error
	mustEmbedUnimplementedGreeterServer()
}

type UnimplementedGreeterServer struct{}

func (UnimplementedGreeterServer) SayHello(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return nil, status.Errorf(codes.Unimplemented, "method SayHello not implemented")
}
func (UnimplementedGreeterServer) SayHelloAgain(*wrapperspb.StringValue, grpc.ServerStreamingServer[wrapperspb.StringValue]) error {
	return status.Errorf(codes.Unimplemented, "method SayHelloAgain not implemented")
}
func (UnimplementedGreeterServer) mustEmbedUnimplementedGreeterServer() {}

func RegisterGreeterServer(s grpc.ServiceRegistrar, srv GreeterServer) {
	s.RegisterService(&Greeter_ServiceDesc, srv)
}

func _Greeter_SayHello_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(GreeterServer).SayHello(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: Greeter_SayHello_FullMethodName}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(GreeterServer).SayHello(ctx, req.(*wrapperspb.StringValue))
	}
	return interceptor(ctx, in, info, handler)
}

func _Greeter_SayHelloAgain_Handler(srv interface{}, stream grpc.ServerStream) error {
	m := new(wrapperspb.StringValue)
	if err := stream.RecvMsg(m); err != nil {
		return err
	}
	return srv.(GreeterServer).SayHelloAgain(m, &grpc.GenericServerStream[wrapperspb.StringValue, wrapperspb.StringValue]{ServerStream: stream})
}

var Greeter_ServiceDesc = grpc.ServiceDesc{
	ServiceName: "helloworld.Greeter",
	HandlerType: (*GreeterServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "SayHello", Handler: _Greeter_SayHello_Handler},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "SayHelloAgain", Handler: _Greeter_SayHelloAgain_Handler, ServerStreams: true},
	},
	Metadata: "helloworld.proto",
}

// The server, as gRPC-go's greeter_server.

type server struct {
	UnimplementedGreeterServer
}

func (s *server) SayHello(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("fail")) > 0 {
		return nil, status.Error(codes.FailedPrecondition, "asked to fail")
	}
	grpc.SetHeader(ctx, metadata.Pairs("greeted", in.GetValue()))
	return wrapperspb.String("Hello " + in.GetValue()), nil
}

func (s *server) SayHelloAgain(in *wrapperspb.StringValue, stream grpc.ServerStreamingServer[wrapperspb.StringValue]) error {
	for _, w := range []string{"Hello", "again"} {
		if err := stream.Send(wrapperspb.String(w + " " + in.GetValue())); err != nil {
			return err
		}
	}
	return nil
}

// countingOption is a server option of the user's own, as gRPC-go allows.
type countingOption struct {
	grpc.EmptyServerOption
}

// tagOption is a call option of the user's own, which an interceptor finds.
type tagOption struct {
	grpc.EmptyCallOption
	tag string
}

func serve(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	s := grpc.NewServer(opts...)
	RegisterGreeterServer(s, &server{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func TestGreeter(t *testing.T) {
	addr := serve(t, countingOption{})
	var tags []string
	tagger := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for _, o := range opts {
			if o, ok := o.(tagOption); ok {
				tags = append(tags, o.tag)
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(tagger))
	if err != nil {
		t.Fatalf("did not connect: %v", err)
	}
	defer conn.Close()
	c := NewGreeterClient(conn)
	ctx := context.Background()

	var header metadata.MD
	var p peer.Peer
	r, err := c.SayHello(ctx, wrapperspb.String("world"), grpc.Header(&header), grpc.Peer(&p), tagOption{tag: "mine"})
	if err != nil {
		t.Fatalf("could not greet: %v", err)
	}
	if got := r.GetValue(); got != "Hello world" {
		t.Errorf("greeting %q, want %q", got, "Hello world")
	}
	if got := header.Get("greeted"); len(got) != 1 || got[0] != "world" {
		t.Errorf("header greeted = %q, want [world]", got)
	}
	if p.Addr == nil || p.Addr.String() != addr {
		t.Errorf("peer %v, want %s", p.Addr, addr)
	}
	if len(tags) != 1 || tags[0] != "mine" {
		t.Errorf("the interceptor saw the tags %q, want [mine]", tags)
	}

	_, err = c.SayHello(metadata.AppendToOutgoingContext(ctx, "fail", "1"), wrapperspb.String("x"))
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("failing call: %v, want FailedPrecondition", err)
	}

	stream, err := c.SayHelloAgain(ctx, wrapperspb.String("world"))
	if err != nil {
		t.Fatalf("SayHelloAgain: %v", err)
	}
	var got []string
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		got = append(got, m.GetValue())
	}
	if len(got) != 2 || got[0] != "Hello world" || got[1] != "again world" {
		t.Errorf("stream %q", got)
	}
}

// TestDial: gRPC-go's deprecated Dial and DialContext, with WithBlock and
// WithInsecure, still used by most programs written for it.
func TestDial(t *testing.T) {
	addr := serve(t)

	conn, err := grpc.Dial(addr, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if r, err := NewGreeterClient(conn).SayHello(context.Background(), wrapperspb.String("dial")); err != nil || r.GetValue() != "Hello dial" {
		t.Errorf("SayHello over Dial: %v, %v", r, err)
	}
	conn.Close()

	conn, err = grpc.DialContext(context.Background(), addr, grpc.WithInsecure())
	if err != nil {
		t.Fatalf("DialContext: %v", err)
	}
	if r, err := NewGreeterClient(conn).SayHello(context.Background(), wrapperspb.String("ctx")); err != nil || r.GetValue() != "Hello ctx" {
		t.Errorf("SayHello over DialContext: %v, %v", r, err)
	}
	conn.Close()
}

// TestDialBlockCanceled: WithBlock waits for a server that is not there
// until its context ends, and returns the context's error, as gRPC-go's.
func TestDialBlockCanceled(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nobody listens there now

	ctx, cancel := context.WithCancel(context.Background())
	conn, err := grpc.DialContext(ctx, addr, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithChainUnaryInterceptor(), // options still compose
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			cancel() // the first failed attempt ends the wait
			return nil, &net.OpError{Op: "dial", Err: io.ErrUnexpectedEOF}
		}))
	if err != context.Canceled || conn != nil {
		t.Fatalf("DialContext = %v, %v; want nil, context.Canceled", conn, err)
	}
}

// TestUnixAbstract: gRPC's unix-abstract: target reaches a server on a
// socket in Linux's abstract namespace.
func TestUnixAbstract(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the abstract socket namespace is Linux's")
	}
	name := fmt.Sprintf("rdmarpc-grpc-test-%d", os.Getpid())
	lis, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	RegisterGreeterServer(s, &server{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(lis) }()
	defer func() {
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient("unix-abstract:"+name, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if r, err := NewGreeterClient(conn).SayHello(context.Background(), wrapperspb.String("abstract")); err != nil || r.GetValue() != "Hello abstract" {
		t.Errorf("SayHello: %v, %v", r, err)
	}
}

type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"token": string(c)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return false }

// TestPerRPCCredsCallOption: an interceptor finds a call's credentials by
// their option's type, as gRPC-go's interceptor example does, and they
// still reach the server.
func TestPerRPCCredsCallOption(t *testing.T) {
	seen := make(chan []string, 1) // the server's goroutine to the test's
	check := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		seen <- md.Get("token")
		return handler(ctx, req)
	}
	addr := serve(t, grpc.UnaryInterceptor(check))
	found := false
	look := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for _, o := range opts {
			if o, ok := o.(grpc.PerRPCCredsCallOption); ok && o.Creds != nil {
				found = true
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(addr, grpc.WithInsecure(), grpc.WithUnaryInterceptor(look))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := NewGreeterClient(conn).SayHello(context.Background(), wrapperspb.String("x"), grpc.PerRPCCredentials(tokenCreds("t1"))); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Error("the interceptor found no PerRPCCredsCallOption")
	}
	if got := <-seen; len(got) != 1 || got[0] != "t1" {
		t.Errorf("the server saw tokens %q, want [t1]", got)
	}
}

// TestDialFailures: FailOnNonTempDialError returns the failed attempt's
// error; WithReturnConnectionError wraps the last failure with the
// context's error.
func TestDialFailures(t *testing.T) {
	refuse := func(context.Context, string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Err: io.ErrUnexpectedEOF}
	}
	conn, err := grpc.DialContext(context.Background(), "127.0.0.1:1", grpc.WithInsecure(), grpc.WithBlock(),
		grpc.FailOnNonTempDialError(true), grpc.WithContextDialer(refuse))
	if conn != nil || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), io.ErrUnexpectedEOF.Error()) {
		t.Errorf("FailOnNonTempDialError: %v, %v; want nil and the dial's Unavailable", conn, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dials := 0
	conn, err = grpc.DialContext(ctx, "127.0.0.1:1", grpc.WithInsecure(), grpc.WithReturnConnectionError(),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: time.Millisecond, Multiplier: 1, MaxDelay: time.Millisecond}}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if dials++; dials == 2 {
				cancel() // the first attempt failed; give up during the second
			}
			return refuse(ctx, addr)
		}))
	// What failed last depends on when the cancel lands: an attempt's
	// error, or that no backend is ready; Unavailable either way.
	if conn != nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "Unavailable") {
		t.Errorf("WithReturnConnectionError: %v, %v; want nil and an error wrapping context.Canceled and an Unavailable", conn, err)
	}
}
