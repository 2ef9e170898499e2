package h2client

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Scheme is the transport scheme of the gRPC protocol: grpc://host:port.
const Scheme = "grpc"

// ALPN is the application protocol a TLS dial offers and requires: HTTP/2.
const ALPN = "h2"

func init() { transport.Register(Scheme, Transport{}) }

// Transport dials gRPC servers over HTTP/2: cleartext with prior
// knowledge, or TLS when the dial has transport credentials.
type Transport struct{}

// Dial connects to addr ("host:port") in cleartext.
func (Transport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return dial(ctx, addr, nil)
}

// DialWithCredentials connects to addr and runs creds' handshake first.
func (Transport) DialWithCredentials(ctx context.Context, addr string, creds credentials.TransportCredentials) (transport.Conn, error) {
	return dial(ctx, addr, creds)
}

// Listen refuses: grpc:// names servers to call.
func (Transport) Listen(addr string) (transport.Listener, error) {
	return nil, errors.New("h2client: grpc:// is a client scheme: serve on tcp://, unix:// or rdma://")
}

func dial(ctx context.Context, addr string, creds credentials.TransportCredentials) (transport.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewClientConn(ctx, nc, addr, creds)
}

// NewClientConn runs the HTTP/2 client's side on nc (after creds'
// handshake, unless nil) and returns the connection. It closes nc when it
// fails.
func NewClientConn(ctx context.Context, nc net.Conn, authority string, creds credentials.TransportCredentials) (transport.Conn, error) {
	var auth credentials.AuthInfo
	if creds != nil {
		if n, ok := creds.(credentials.NextProtosCredentials); ok {
			creds = n.WithNextProtos(ALPN) // gRPC servers require it
		}
		sc, ai, err := creds.ClientHandshake(ctx, authority, nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		if ti, ok := ai.(credentials.TLSInfo); ok && ti.State.NegotiatedProtocol != ALPN {
			sc.Close()
			return nil, fmt.Errorf("h2client: the server at %s did not agree to HTTP/2 through TLS's ALPN (negotiated %q, want %q): is it a gRPC server?", authority, ti.State.NegotiatedProtocol, ALPN)
		}
		nc, auth = sc, ai
	}
	if a, ok := creds.(interface{ Authority() string }); ok && a.Authority() != "" {
		authority = a.Authority() // the target's name when a resolver made addresses of it
	}
	c := newConn(nc, authority, creds != nil, auth)
	if err := c.handshake(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("h2client: HTTP/2 handshake with %s: %w", authority, err)
	}
	go c.readLoop()
	return c, nil
}

var (
	_ transport.Conn     = (*Conn)(nil)
	_ transport.Secured  = (*Conn)(nil)
	_ transport.Activity = (*Conn)(nil)
)
