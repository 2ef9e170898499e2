package grpcecho

import (
	"context"
	"errors"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

// sayer is the server interface the descriptor's HandlerType names.
type sayer interface {
	Say(context.Context, *echopb.SayRequest) (*echopb.SayResponse, error)
}

type echoService struct{}

func (echoService) Say(_ context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: req.Message, Payload: req.Payload}, nil
}

func sayHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(echopb.SayRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(sayer).Say(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: echopb.Echo_Say_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(sayer).Say(ctx, req.(*echopb.SayRequest))
	})
}

// serviceDesc is what protoc-gen-go-grpc would generate for echo.proto.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "rdmarpc.echo.v1.Echo",
	HandlerType: (*sayer)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Say", Handler: sayHandler}},
	Metadata:    "echo.proto",
}

// The streaming Echo (bench.StreamEchoFullMethod): a bidirectional stream
// that sends back each message, until the client half-closes.
const streamMethod = bench.StreamEchoFullMethod

var streamDesc = grpc.ServiceDesc{
	ServiceName: "rdmarpc.bench.v1.StreamEcho",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Echo",
		Handler:       streamEchoHandler,
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: "bench/stream.go",
}

func streamEchoHandler(_ any, stream grpc.ServerStream) error {
	for {
		req := new(echopb.SayRequest)
		if err := stream.RecvMsg(req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := stream.SendMsg(&echopb.SayResponse{Message: req.Message, Payload: req.Payload}); err != nil {
			return err
		}
	}
}

// Server is a gRPC Echo server running in this process.
type Server struct {
	gs   *grpc.Server
	addr string
	done chan error
}

// Start serves Echo over gRPC on a TCP address ("127.0.0.1:0"), with
// grpc.NewServer's defaults.
func Start(addr string) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{gs: grpc.NewServer(), addr: lis.Addr().String(), done: make(chan error, 1)}
	s.gs.RegisterService(&serviceDesc, echoService{})
	s.gs.RegisterService(&streamDesc, echoService{})
	go func() { s.done <- s.gs.Serve(lis) }()
	return s, nil
}

// Addr is the host:port clients dial.
func (s *Server) Addr() string { return s.addr }

// Stop stops the server at once and waits until Serve has returned.
func (s *Server) Stop() error {
	s.gs.Stop()
	return <-s.done
}

// Client calls Echo over one gRPC connection.
type Client struct{ cc *grpc.ClientConn }

// Dial returns a client of the Echo server at addr. Its only option is
// plaintext credentials, which gRPC requires to be stated; it connects on
// the first call.
func Dial(addr string) (*Client, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &Client{cc}, nil
}

// Say calls Echo.Say.
func (c *Client) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	out := new(echopb.SayResponse)
	if err := c.cc.Invoke(ctx, echopb.Echo_Say_FullMethodName, req, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// Stream is one streaming Echo; it has bench.EchoStream's methods.
type Stream struct{ cs grpc.ClientStream }

// Send sends one message.
func (s Stream) Send(m *echopb.SayRequest) error { return s.cs.SendMsg(m) }

// Recv receives the next echo.
func (s Stream) Recv() (*echopb.SayResponse, error) {
	m := new(echopb.SayResponse)
	if err := s.cs.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// CloseSend half-closes the stream.
func (s Stream) CloseSend() error { return s.cs.CloseSend() }

// OpenStream opens a streaming Echo on the client's connection: Client is
// a bench.Streamer.
func (c *Client) OpenStream(ctx context.Context) (bench.EchoStream, error) {
	cs, err := c.cc.NewStream(ctx, &streamDesc.Streams[0], streamMethod)
	if err != nil {
		return nil, err
	}
	return Stream{cs}, nil
}
