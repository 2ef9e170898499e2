package bench

import (
	"context"
	"fmt"
	"net/url"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Client is one connection to an Echo server, safe for concurrent use: the
// shape both rdmarpc's generated client and the gRPC baseline take.
type Client interface {
	Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error)
	Streamer
	Close() error
}

// EchoService answers Say with the request's message and payload.
type EchoService struct {
	echopb.UnimplementedEchoServer
}

// Say returns what it was sent.
func (EchoService) Say(_ context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: req.Message, Payload: req.Payload}, nil
}

// Server is an rdmarpc Echo server running in this process.
type Server struct {
	srv    *rpc.Server
	target string
	done   chan error
}

// StartServer listens on target ("tcp://127.0.0.1:0", "rdma://10.9.9.1:7000")
// with the transport registered for its scheme and serves Echo there until
// Stop. The program must import that transport.
func StartServer(target string, opts ...rpc.ServerOption) (*Server, error) {
	lis, err := transport.Listen(target)
	if err != nil {
		return nil, err
	}
	scheme, _, _ := transport.ParseTarget(target)
	s := &Server{
		srv:    rpc.NewServer(opts...),
		target: scheme + "://" + lis.Addr().String(),
		done:   make(chan error, 1),
	}
	echopb.RegisterEchoServer(s.srv, EchoService{})
	s.srv.RegisterService(&streamDesc, EchoService{})
	go func() { s.done <- s.srv.Serve(lis) }()
	return s, nil
}

// Target is the address clients dial, with the port the listener got.
func (s *Server) Target() string { return s.target }

// Stop stops the server and waits until it has stopped.
func (s *Server) Stop() error {
	s.srv.Stop()
	return <-s.done
}

type rdmarpcClient struct {
	echo echopb.EchoClient
	cc   *rpc.ClientConn
}

func (c rdmarpcClient) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	return c.echo.Say(ctx, req)
}

func (c rdmarpcClient) Close() error { return c.cc.Close() }

// Dial connects an rdmarpc Echo client to target.
func Dial(ctx context.Context, target string, opts ...rpc.DialOption) (Client, error) {
	cc, err := rpc.Dial(ctx, target, opts...)
	if err != nil {
		return nil, err
	}
	return rdmarpcClient{echopb.NewEchoClient(cc), cc}, nil
}

// Host returns the host part of target ("rdma://10.9.9.1:7000" → "10.9.9.1").
func Host(target string) (string, error) {
	_, addr, err := transport.ParseTarget(target)
	if err != nil {
		return "", err
	}
	u, err := url.Parse("x://" + addr)
	if err != nil {
		return "", fmt.Errorf("bench: target %q: %w", target, err)
	}
	return u.Hostname(), nil
}
