package tcp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/internal/accept"
)

// Listen listens on addr ("host:port"; port 0 picks one). Each accepted
// socket does its TLS handshake (when configured) and hello in a goroutine
// of its own; peers that fail are refused and logged (rate-limited), and so
// are connections closed later for an oversized frame. The listener
// implements transport.Logged.
func (t *Transport) Listen(addr string) (transport.Listener, error) {
	nl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", addr, err)
	}
	log := accept.NewLog(t.o.Logger, "tcp")
	return accept.NewWithOptions(nl, func(ctx context.Context, nc net.Conn) (transport.Conn, error) {
		if t.o.TLS != nil {
			nc = tls.Server(nc, t.o.TLS)
		}
		return t.handshake(ctx, nc, log.Refused)
	}, accept.Options{Log: log, MaxConns: t.o.MaxConnections}), nil
}
