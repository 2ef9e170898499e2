package drpcecho

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/protobuf/proto"
	"storj.io/drpc"
	"storj.io/drpc/drpcconn"
	"storj.io/drpc/drpcmux"
	"storj.io/drpc/drpcserver"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/connpool"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

// protoEnc is the encoding protoc-gen-go-drpc generates for
// google.golang.org/protobuf messages.
type protoEnc struct{}

func (protoEnc) Marshal(msg drpc.Message) ([]byte, error) { return proto.Marshal(msg.(proto.Message)) }
func (protoEnc) Unmarshal(buf []byte, msg drpc.Message) error {
	return proto.Unmarshal(buf, msg.(proto.Message))
}

// sayer is the server interface: DRPCEchoServer in generated code.
type sayer interface {
	Say(context.Context, *echopb.SayRequest) (*echopb.SayResponse, error)
}

// description is DRPCEchoDescription.
type description struct{}

func (description) NumMethods() int { return 1 }

func (description) Method(n int) (string, drpc.Encoding, drpc.Receiver, any, bool) {
	if n != 0 {
		return "", nil, nil, nil, false
	}
	return echopb.Echo_Say_FullMethodName, protoEnc{},
		func(srv any, ctx context.Context, in1, _ any) (drpc.Message, error) {
			return srv.(sayer).Say(ctx, in1.(*echopb.SayRequest))
		}, sayer.Say, true
}

type echoService struct{}

func (echoService) Say(_ context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: req.Message, Payload: req.Payload}, nil
}

// Server is a drpc Echo server running in this process.
type Server struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// Start serves Echo over drpc on a TCP address ("127.0.0.1:0").
func Start(addr string) (*Server, error) {
	mux := drpcmux.New()
	if err := mux.Register(echoService{}, description{}); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{addr: lis.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	srv := drpcserver.New(mux)
	go func() { s.done <- srv.Serve(ctx, lis) }()
	return s, nil
}

// Addr is the host:port clients dial.
func (s *Server) Addr() string { return s.addr }

// Stop closes the listener and every connection and waits until Serve has
// returned (drpcserver waits for its connections' goroutines).
func (s *Server) Stop() error {
	s.cancel()
	return <-s.done
}

// Client calls Echo over drpc, one call in flight per connection.
type Client struct {
	pool *connpool.Pool[*drpcconn.Conn]
}

// Dial returns a client of the server at addr; it connects on the first
// call, and once more for each call that finds every connection busy.
func Dial(addr string) *Client {
	return &Client{pool: connpool.New(func() (*drpcconn.Conn, error) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return drpcconn.New(nc), nil
	})}
}

// Say calls Echo.Say.
func (c *Client) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	cn, err := c.pool.Get()
	if err != nil {
		return nil, err
	}
	out := new(echopb.SayResponse)
	if err := cn.Invoke(ctx, echopb.Echo_Say_FullMethodName, protoEnc{}, req, out); err != nil {
		c.pool.Discard(cn)
		return nil, err
	}
	c.pool.Put(cn)
	return out, nil
}

// Close closes every connection.
func (c *Client) Close() error { return c.pool.Close() }

// OpenStream is not offered: the drpc peer runs unary cells only.
func (c *Client) OpenStream(context.Context) (bench.EchoStream, error) {
	return nil, fmt.Errorf("drpcecho: no streams: %w", errors.ErrUnsupported)
}
