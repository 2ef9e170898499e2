package tcp

import (
	"context"
	"fmt"
	"net"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/internal/accept"
)

// Listen listens on addr ("host:port"; port 0 picks one) and serves it as
// NewListener does, with Options.TLS as the credentials when set.
func (t *Transport) Listen(addr string) (transport.Listener, error) {
	return t.ListenWithCredentials(addr, t.creds)
}

// ListenWithCredentials is Listen with every connection secured by creds
// (nil: plaintext). It implements transport.CredentialsListener.
func (t *Transport) ListenWithCredentials(addr string, creds credentials.TransportCredentials) (transport.Listener, error) {
	nl, err := net.Listen(t.network, addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", addr, err)
	}
	return t.NewListener(nl, creds), nil
}

// NewListener serves the TCP transport's framing on the connections nl
// accepts, whatever nl is: a TCP or unix socket, one handed over by socket
// activation, an in-memory one (test/bufconn). Each accepted socket does
// its credentials handshake (creds; nil: plaintext) and hello in a
// goroutine of its own; peers that fail are refused and logged
// (rate-limited), and so are connections closed later for an oversized
// frame. The listener implements transport.Logged and
// transport.SecuredListener; closing it closes nl.
func (t *Transport) NewListener(nl net.Listener, creds credentials.TransportCredentials) transport.Listener {
	log := accept.NewLog(t.o.Logger, "tcp")
	var secure secureFunc
	if creds != nil {
		secure = func(_ context.Context, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
			return creds.ServerHandshake(raw)
		}
	}
	l := accept.NewWithOptions(nl, func(ctx context.Context, nc net.Conn) (transport.Conn, error) {
		return t.handshake(ctx, nc, secure, log.Refused, nil)
	}, accept.Options{Log: log, MaxConns: t.o.maxConnections()})
	return &listener{Listener: l, creds: creds}
}

// listener is the accept loop and the credentials it runs.
type listener struct {
	*accept.Listener
	creds credentials.TransportCredentials
}

// Credentials are the transport credentials every connection runs; nil:
// none.
func (l *listener) Credentials() credentials.TransportCredentials { return l.creds }
