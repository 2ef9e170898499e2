package rawecho

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/connpool"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

// Server echoes every frame back on the connection it came from.
type Server struct {
	lis  net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn map[net.Conn]struct{}
	done bool
}

// Start listens on a TCP address ("127.0.0.1:0") and serves until Stop.
func Start(addr string) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{lis: lis, conn: map[net.Conn]struct{}{}}
	s.wg.Go(s.accept)
	return s, nil
}

// Addr is the host:port clients dial.
func (s *Server) Addr() string { return s.lis.Addr().String() }

func (s *Server) accept() {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return // Stop closed the listener
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conn[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() { s.echo(c) })
	}
}

// echo sends back each frame until the peer closes or sends a bad one.
func (s *Server) echo(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conn, c)
		s.mu.Unlock()
		c.Close()
	}()
	var buf []byte
	for {
		var err error
		if buf, err = readFrame(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// Stop closes the listener and every connection, and waits for their
// goroutines.
func (s *Server) Stop() error {
	s.mu.Lock()
	s.done = true
	err := s.lis.Close()
	for c := range s.conn {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// conn is one client connection with its buffers.
type conn struct {
	net.Conn
	out, in []byte
}

// Client calls the raw echo, one call in flight per connection.
type Client struct{ pool *connpool.Pool[*conn] }

// Dial returns a client of the server at addr; it connects on the first
// call, and once more for each call that finds every connection busy.
func Dial(addr string) *Client {
	return &Client{pool: connpool.New(func() (*conn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: c}, nil
	})}
}

// Say sends req's payload in one frame and returns the frame that comes
// back as the response's payload. ctx's deadline, if any, bounds the call
// (as the socket's deadline); a cancellation without one is not watched:
// the floor spends nothing on it.
func (c *Client) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	if req.GetMessage() != "" {
		return nil, errors.New("rawecho: carries the payload only, not a Message")
	}
	if len(req.GetPayload()) > MaxFrame {
		return nil, fmt.Errorf("rawecho: payload of %d bytes, more than %d", len(req.GetPayload()), MaxFrame)
	}
	cn, err := c.pool.Get()
	if err != nil {
		return nil, err
	}
	resp, err := cn.call(ctx, req.GetPayload())
	if err != nil {
		c.pool.Discard(cn)
		return nil, err
	}
	c.pool.Put(cn)
	return resp, nil
}

func (c *conn) call(ctx context.Context, payload []byte) (*echopb.SayResponse, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
		defer c.SetDeadline(time.Time{})
	}
	c.out = append(append(c.out[:0], 0, 0, 0, 0), payload...)
	putHeader(c.out)
	if _, err := c.Write(c.out); err != nil {
		return nil, err
	}
	var err error
	if c.in, err = readFrame(c.Conn, c.in); err != nil {
		return nil, noEOF(err)
	}
	// The response owns its payload, as an RPC's does.
	return &echopb.SayResponse{Payload: append([]byte(nil), c.in[headerLen:]...)}, nil
}

// Close closes every connection.
func (c *Client) Close() error { return c.pool.Close() }

// OpenStream is not offered: the raw peer runs unary cells only.
func (c *Client) OpenStream(context.Context) (bench.EchoStream, error) {
	return nil, fmt.Errorf("rawecho: no streams: %w", errors.ErrUnsupported)
}
