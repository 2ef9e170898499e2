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

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"
)

func init() {
	transport.Register("tcp", New(Options{}))
	transport.Register("unix", NewUnix(Options{}))
}

// DefaultMaxMessageSize is the largest message the TCP transport accepts,
// and announces to its peers, unless Options.MaxMessageSize says otherwise:
// the RPC layer's default receive limit (rpc.DefaultMaxRecvMsgSize, 4 MiB
// of payload) plus 64 KiB for the RPC frame's header and metadata. A
// server or client that raises its RPC receive limit raises this one too,
// or the peer refuses to send what would not fit.
const DefaultMaxMessageSize = 4<<20 + 64<<10

// Options configure the TCP transport. The zero value is usable.
type Options struct {
	// TLS, when set, wraps every connection in TLS, as
	// credentials.NewTLS(TLS) does: a client config for Dial (ServerName
	// defaults to the dialled host), a server config for Listen. The RPC
	// layer's rpc.WithTransportCredentials and rpc.Creds are the other way
	// to the same, and take precedence.
	TLS *tls.Config
	// MaxMessageSize is the largest message this side accepts, announced
	// to the peer. Default DefaultMaxMessageSize. The reader allocates a
	// message's memory as its bytes arrive, not from the length the peer
	// announces, so a large limit costs nothing until a message uses it.
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
	// StallTimeout bounds how long the reader waits for the next byte of
	// a message it has started to read: a peer that stops in the middle
	// of a message is closed after it (at most a quarter of it later), with a (rate-limited) log line on
	// a listener, instead of holding the connection until a keepalive
	// notices. Between messages there is no bound (an idle connection is
	// keepalive's business). Default 20 s.
	StallTimeout time.Duration
	// MaxConnections bounds the connections a listener holds at once
	// (those still in their handshake included). Beyond it, a new
	// connection is accepted and closed at once, with a (rate-limited) log
	// line, so its client fails fast instead of waiting in the backlog, and
	// the process keeps descriptors for everything else it opens. Default
	// (0): the process's limit on open files less an eighth of it (at
	// least 64), read when Listen is called; negative: no bound.
	MaxConnections int
	// Logger receives the listener's lines: refused peers (rate-limited),
	// temporary accept errors, connections over MaxConnections. Default
	// zap.NewNop(); an RPC server serving the listener replaces it with its
	// own (transport.Logged).
	Logger *zap.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
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
	if o.StallTimeout <= 0 {
		o.StallTimeout = 20 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// maxConnections is the listener's connection limit: MaxConnections, or
// the default that leaves headroom under the open-files limit; 0, none.
func (o Options) maxConnections() int {
	switch {
	case o.MaxConnections > 0:
		return o.MaxConnections
	case o.MaxConnections < 0:
		return 0
	}
	if n := fdLimit(); n > 0 {
		return max(1, n-max(64, n/8))
	}
	return 0
}

// Transport is the TCP transport.
type Transport struct {
	o       Options
	creds   credentials.TransportCredentials // from Options.TLS; nil: plaintext
	network string                           // "tcp", or "unix"
}

// New returns a TCP transport with options o.
func New(o Options) *Transport {
	t := &Transport{o: o.withDefaults(), network: "tcp"}
	if o.TLS != nil {
		t.creds = credentials.NewTLS(o.TLS)
	}
	return t
}

// NewUnix returns the same transport over unix stream sockets: its
// addresses are socket paths ("unix:///run/kv.sock" names /run/kv.sock).
// It is registered for the "unix" scheme, which resolver/unix's targets
// ask for.
func NewUnix(o Options) *Transport {
	t := New(o)
	t.network = "unix"
	return t
}

// Dial connects to addr ("host:port") and exchanges hellos, within TLS
// when Options.TLS is set. When ctx ends first, the error wraps ctx.Err().
func (t *Transport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return t.DialWithCredentials(ctx, addr, t.creds)
}

// DialWithCredentials is Dial with the connection secured by creds (TLS)
// before the hellos; nil creds dial in plaintext. creds check the server
// against addr's host unless they name a server. The connection's
// AuthInfo is what the handshake verified. It implements
// transport.CredentialsDialer.
func (t *Transport) DialWithCredentials(ctx context.Context, addr string, creds credentials.TransportCredentials) (transport.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
	}
	c, err := t.NewClientConn(ctx, nc, addr, creds)
	if err != nil {
		return nil, fmt.Errorf("tcp: dial %s: %w", addr, err)
	}
	return c, nil
}

// NewClientConn runs the client's handshake (creds' when not nil, then the
// hellos) on nc, a connection to authority dialled by other means (a unix
// socket, test/bufconn, a proxy). It closes nc when it fails. It implements
// transport.StreamTransport.
func (t *Transport) NewClientConn(ctx context.Context, nc net.Conn, authority string, creds credentials.TransportCredentials) (transport.Conn, error) {
	var secure secureFunc
	if creds != nil {
		secure = func(ctx context.Context, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
			return creds.ClientHandshake(ctx, authority, raw)
		}
	}
	c, err := t.handshake(ctx, nc, secure, nil, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// ServerConn runs the server's side of the handshake on nc, a connection
// accepted by another transport's listener on a port it shares with this
// transport: the RDMA transport's listener hands it the clients of this
// transport that reach its bootstrap port (clients that fell back to TCP).
// head is the start of the client's hello, already read from nc (at most
// its 16 bytes); auth is what nc's credentials verified (nc is then
// secured already; nil: plaintext). refused logs the refusals of the
// connection, as a listener's log does. It closes nc when it fails.
func (t *Transport) ServerConn(ctx context.Context, nc net.Conn, head []byte, auth credentials.AuthInfo, refused func(string, ...zap.Field)) (transport.Conn, error) {
	if len(head) > helloLen {
		nc.Close()
		return nil, fmt.Errorf("%w: %d bytes of hello read ahead, more than %d", transport.ErrProtocol, len(head), helloLen)
	}
	var secure secureFunc
	if auth != nil {
		secure = func(_ context.Context, sec net.Conn) (net.Conn, credentials.AuthInfo, error) { return sec, auth, nil }
	}
	if refused == nil {
		refused = func(string, ...zap.Field) {}
	}
	c, err := t.handshake(ctx, nc, secure, refused, head)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// secureFunc runs transport credentials' handshake on a raw connection,
// closing it when it fails.
type secureFunc func(ctx context.Context, raw net.Conn) (net.Conn, credentials.AuthInfo, error)

// handshake runs the credentials' handshake (when there are any) and the
// hello exchange on nc, within the handshake timeout. An error caused by
// the end of the caller's ctx wraps ctx.Err(); a peer that stays silent
// past the timeout is a protocol error. refused is passed to the
// connection (see newConn); it is set on a listener's side, which reads the
// client's first bytes before it writes: an HTTP/2 client preface there
// makes the connection a transport.Foreign of protocol "h2". head, on a
// listener's side, is the start of the client's first bytes, read already
// (ServerConn's).
func (t *Transport) handshake(ctx context.Context, nc net.Conn, secure secureFunc, refused func(string, ...zap.Field), head []byte) (transport.Conn, error) {
	server := refused != nil
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, t.o.HandshakeTimeout)
	defer cancel()
	// The socket's deadline moves to now when ctx ends, whichever of the
	// caller's end and the timeout comes first; by then ctx (and, when the
	// caller's end caused it, caller) already reports why. It bounds a
	// server's credentials handshake too, which takes no context.
	raw := nc
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Now()) })
	defer stop()
	var ai credentials.AuthInfo
	if secure != nil {
		var err error
		if nc, ai, err = secure(ctx, raw); err != nil {
			switch {
			case caller.Err() != nil:
				return nil, fmt.Errorf("%w: %w", caller.Err(), err)
			case ctx.Err() != nil:
				return nil, fmt.Errorf("%w: no credentials handshake from peer within %v: %w", transport.ErrProtocol, t.o.HandshakeTimeout, err)
			}
			return nil, err
		}
	}
	mine := hello{version: version, max: uint32(t.o.MaxMessageSize)}.encode()
	readFailed := func(err error) error {
		switch {
		case caller.Err() != nil:
			return fmt.Errorf("waiting for the peer's hello: %w", caller.Err())
		case ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("%w: no hello from peer within %v", transport.ErrProtocol, t.o.HandshakeTimeout)
		}
		if secure == nil && !server && errors.Is(err, io.EOF) {
			// What a plaintext client of a TLS server sees.
			return fmt.Errorf("reading hello: %w (the server closed the connection without a hello: does it require TLS?)", err)
		}
		return fmt.Errorf("reading hello: %w", err)
	}
	var theirs [helloLen]byte
	if server {
		// The server reads first: the client's first bytes say which
		// protocol it speaks (an rdmarpc hello, or HTTP/2's client
		// preface, whose first 16 bytes never start with the hello's
		// magic), and an HTTP/2 client must see no hello. The client
		// writes its hello without waiting, so this costs the rdmarpc
		// path no read it did not make anyway.
		n := copy(theirs[:], head)
		if _, err := io.ReadFull(nc, theirs[n:]); err != nil {
			return nil, readFailed(err)
		}
		alpn := ""
		if ti, ok := ai.(credentials.TLSInfo); ok {
			alpn = ti.State.NegotiatedProtocol
		}
		h2 := string(theirs[:]) == http2Preface[:helloLen]
		if h2 && alpn != "" && alpn != "h2" || !h2 && alpn == "h2" {
			return nil, fmt.Errorf("%w: the client negotiated ALPN %q and then spoke the other protocol", transport.ErrProtocol, alpn)
		}
		if h2 {
			var rest [len(http2Preface) - helloLen]byte
			if _, err := io.ReadFull(nc, rest[:]); err != nil {
				return nil, readFailed(err)
			}
			if string(rest[:]) != http2Preface[helloLen:] {
				return nil, fmt.Errorf("%w: a broken HTTP/2 client preface", transport.ErrProtocol)
			}
			if !stop() {
				return nil, readFailed(ctx.Err())
			}
			if err := nc.SetDeadline(time.Time{}); err != nil {
				return nil, err
			}
			return newForeign(nc, "h2", ai), nil
		}
	}
	// A client writes first, then reads: hellos are tiny, so the write
	// cannot block on the server's read.
	if _, err := nc.Write(mine[:]); err != nil {
		if caller.Err() != nil {
			return nil, fmt.Errorf("sending hello: %w", caller.Err())
		}
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	if !server {
		// The first 9 bytes first: an HTTP/2 server (a gRPC server)
		// answers with a SETTINGS frame, maybe of only 15 bytes, and then
		// waits for the rest of a preface that never comes.
		if _, err := io.ReadFull(nc, theirs[:9]); err != nil {
			return nil, readFailed(err)
		}
		if http2Settings(theirs[:9]) {
			return nil, fmt.Errorf("%w: %w: the answer to the hello is an HTTP/2 SETTINGS frame (dial it with grpc://)", transport.ErrProtocol, transport.ErrHTTP2Server)
		}
		if _, err := io.ReadFull(nc, theirs[9:]); err != nil {
			return nil, readFailed(err)
		}
	}
	h, err := decodeHello(theirs[:])
	if err != nil {
		return nil, err
	}
	if !stop() {
		if caller.Err() != nil {
			return nil, caller.Err()
		}
		return nil, fmt.Errorf("%w: no hello from peer within %v", transport.ErrProtocol, t.o.HandshakeTimeout)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return newConn(nc, &t.o, int(h.max), ai, refused), nil
}
