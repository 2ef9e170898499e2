package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
)

func init() { transport.Register("tcp", New(Options{})) }

// Options configure the TCP transport. The zero value is usable.
type Options struct {
	// TLS, when set, wraps every connection in TLS: a client config for
	// Dial (ServerName defaults to the dialled host), a server config for
	// Listen.
	TLS *tls.Config
	// MaxMessageSize is the largest message this side accepts, announced
	// to the peer. Default transport.DefaultMaxMessageSize.
	MaxMessageSize int
	// SendQueueBytes bounds what Send queues ahead of the socket; Send
	// blocks beyond it. Default 4 MiB.
	SendQueueBytes int
	// RecvQueueBytes bounds what is read ahead of Recv; reading stops
	// beyond it, which pushes back on the sender. Default 4 MiB.
	RecvQueueBytes int
	// HandshakeTimeout bounds the TLS handshake and the hello. Default 10 s.
	HandshakeTimeout time.Duration
	// CloseGrace bounds how long Close waits to flush queued messages and
	// to see the peer end its stream. Default 2 s.
	CloseGrace time.Duration
	// Logger receives one line per refused peer or broken connection.
	// Default zap.NewNop().
	Logger *zap.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = transport.DefaultMaxMessageSize
	}
	if o.MaxMessageSize > 1<<32-1 {
		o.MaxMessageSize = 1<<32 - 1
	}
	if o.SendQueueBytes <= 0 {
		o.SendQueueBytes = 4 << 20
	}
	if o.RecvQueueBytes <= 0 {
		o.RecvQueueBytes = 4 << 20
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.CloseGrace <= 0 {
		o.CloseGrace = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	o.Logger = o.Logger.Named("tcp")
	return o
}

// Transport is the TCP transport.
type Transport struct{ o Options }

// New returns a TCP transport with options o.
func New(o Options) *Transport { return &Transport{o: o.withDefaults()} }

// Dial connects to addr ("host:port") and exchanges hellos.
func (t *Transport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
	}
	if t.o.TLS != nil {
		cfg := t.o.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		nc = tls.Client(nc, cfg)
	}
	c, err := t.handshake(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
	}
	return c, nil
}

// handshake runs TLS (when configured) and the hello exchange on nc.
func (t *Transport) handshake(ctx context.Context, nc net.Conn) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.o.HandshakeTimeout)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	if tc, ok := nc.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
	}
	mine := hello{version: version, max: uint32(t.o.MaxMessageSize)}.encode()
	// Both sides write first, then read: hellos are tiny, so neither write
	// can block on the other side's read.
	if _, err := nc.Write(mine[:]); err != nil {
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	var theirs [helloLen]byte
	if _, err := io.ReadFull(nc, theirs[:]); err != nil {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%w: no hello from peer within %v", transport.ErrProtocol, t.o.HandshakeTimeout)
		}
		return nil, fmt.Errorf("reading hello: %w", err)
	}
	h, err := decodeHello(theirs[:])
	if err != nil {
		return nil, err
	}
	if !stop() {
		return nil, ctx.Err()
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return newConn(nc, &t.o, int(h.max)), nil
}
