package transport

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/credentials"
)

// DefaultMaxMessageSize is the largest message a transport accepts unless
// configured otherwise, for transports that do not document a default of
// their own (the RDMA transport uses it). The TCP transport's default,
// tcp.DefaultMaxMessageSize, is the RPC layer's default receive limit plus
// room for headers.
const DefaultMaxMessageSize = 64 << 20

var (
	// ErrClosed is wrapped by every error caused by a closed connection or
	// listener, whoever closed it; the wrapping error says why.
	ErrClosed = errors.New("transport: connection closed")

	// ErrMessageTooLarge is wrapped by the error returned when a message
	// exceeds the size limit of the side that must take it.
	ErrMessageTooLarge = errors.New("transport: message too large")

	// ErrProtocol is wrapped by errors caused by a peer that broke the
	// transport's protocol (garbage, bad handshake, oversized frame, credit
	// violation). The connection it happened on is closed.
	ErrProtocol = errors.New("transport: protocol violation")

	// ErrNoDevice is wrapped when no device serves the requested address
	// (for instance no RDMA device owns the IP). Callers may fall back to
	// another transport.
	ErrNoDevice = errors.New("transport: no device serves this address")

	// ErrHTTP2Server is wrapped (with ErrProtocol) when a client's peer
	// answers its hello in HTTP/2, as a gRPC server does: it speaks the
	// gRPC protocol, not the transport's framing. auto:// targets then
	// dial it with the "grpc" transport.
	ErrHTTP2Server = errors.New("transport: the server speaks HTTP/2 (a gRPC server)")
)

// Conn is one message-oriented connection. All methods are safe for
// concurrent use. Messages sent by one goroutine arrive in the order it sent
// them; messages are never split, merged, reordered or duplicated.
type Conn interface {
	// Send transmits msg as one message. msg may be reused as soon as Send
	// returns. Send blocks while the peer cannot take more (backpressure)
	// and gives up when ctx is done; a message is either wholly sent or
	// not sent at all. Sending over MaxMessageSize fails with an error
	// wrapping ErrMessageTooLarge and leaves the connection usable.
	Send(ctx context.Context, msg []byte) error

	// NewSendBuffer returns a buffer of exactly n bytes to be filled in
	// place and passed to SendBuffer. A buffer that is not sent must be
	// released. Transports with registered memory hand out that memory.
	NewSendBuffer(ctx context.Context, n int) (Buffer, error)

	// SendBuffer sends a buffer from NewSendBuffer of this connection as
	// one message; it takes ownership of b whatever the outcome.
	SendBuffer(ctx context.Context, b Buffer) error

	// Recv returns the next message. The caller owns the returned buffer
	// and must Release it; transports may withhold flow-control credit
	// while messages are held, so release promptly. Recv gives up when ctx
	// is done, returning ctx.Err(); a ctx's Done channel may deliver a
	// value rather than be closed (the RPC client asks its reader's Recv
	// to step aside so, allocating nothing), so Recv receives from Done at
	// most once and then returns. Once the connection is closed it returns
	// an error wrapping ErrClosed (after every message that had arrived
	// was returned).
	Recv(ctx context.Context) (Buffer, error)

	// Close tears the connection down. Pending and later calls on both
	// sides fail with errors wrapping ErrClosed. Messages whose Send
	// returned before Close are delivered if the peer is alive to take
	// them within a short grace period. Close is idempotent.
	Close() error

	// Done is closed when the connection is closed, by either side or by a
	// failure.
	Done() <-chan struct{}

	// MaxMessageSize is the largest message Send accepts: the limit the
	// peer announced for what it receives.
	MaxMessageSize() int

	LocalAddr() net.Addr
	RemoteAddr() net.Addr
}

// Listener accepts connections whose handshake has succeeded. Peers that fail
// the handshake are refused and logged; they never surface from Accept, and
// the listener goes on serving others.
type Listener interface {
	// Accept waits for the next connection. After Close it returns an
	// error wrapping ErrClosed.
	Accept(ctx context.Context) (Conn, error)
	// Close stops listening; connections already accepted stay open.
	Close() error
	Addr() net.Addr
}

// Transport dials and listens on addresses of one scheme. Addresses have no
// scheme prefix: "host:port".
type Transport interface {
	Dial(ctx context.Context, addr string) (Conn, error)
	Listen(addr string) (Listener, error)
}

// Counters is implemented by transports that count what they do (credits
// waited for, receives posted, completions, errors by kind). Names are
// snake_case; values only grow. Metrics exporters read them.
type Counters interface {
	Counters() map[string]uint64
}

// Gauges is implemented by transports that report levels, values that go up
// and down (registered memory in use, its budget). Names are snake_case.
// They are kept apart from Counters so that what reads counters as totals
// (per-call differences, Prometheus counters) never sees a level.
type Gauges interface {
	Gauges() map[string]uint64
}

// Activity is implemented by connections that can say how many bytes have
// arrived from the peer so far, counting the parts of messages that have not
// yet arrived whole. A keepalive takes any growth as a sign of life, so a
// slow but live peer sending one large message is not taken for dead.
type Activity interface {
	// BytesReceived is the number of bytes read from the peer since the
	// connection opened; it only grows.
	BytesReceived() uint64
}

// Arrivals is implemented by connections that can tell their reader of a
// message that came while nobody waited in Recv. It lets the RPC layer leave
// a connection unread for a while (a server running the call it just read,
// a client between calls) without handing the reading to a goroutine that
// waits in Recv: a hand-off is a goroutine wake-up per call, and here one
// happens only when a message does come.
type Arrivals interface {
	// OnArrival arranges for f to be called once, at the next message
	// delivered or when the connection ends, unless a message is queued
	// already or it has ended: then it reports false and f is never
	// called. f runs on the transport's goroutine, maybe with its locks
	// held: it must not block or call into the connection. A later call
	// replaces f; OnArrival(nil) cancels it, and once that returns the
	// old f is not running and will not run.
	OnArrival(f func()) bool
}

// BackgroundSender is implemented by connections that can send a message
// more cheaply when nobody waits on its answer soon and a Close right after
// may drop it: keepalive's PING and PONG (a connection being closed needs
// neither), which are all an idle RPC connection sends. rdma:// then does
// not rouse the receiving goroutine to poll for a reply, and asks for no
// completion of a small message (one completion event less at each end).
// SendBackground is Send otherwise; unlike Send, a message whose
// SendBackground returned before Close may be lost by Close.
type BackgroundSender interface {
	SendBackground(ctx context.Context, msg []byte) error
}

// TrySender is implemented by connections that can tell, without waiting,
// whether a message can go at once: TrySend sends msg when the connection
// has room for it now, as Send would, and reports false, sending nothing,
// when Send would have to wait (for room, for the peer's credits). It
// never blocks. The RPC layer sends its small control frames (a window
// update after each large message read) this way from the goroutine that
// read the message, and hands them to a goroutine of its own only when
// they would wait.
type TrySender interface {
	TrySend(msg []byte) (bool, error)
}

// VectorSender is implemented by connections that can send a message
// given in parts without first copying them into one buffer: SendVec sends
// the concatenation of bufs as one message, as Send sends msg (the same
// size limit, backpressure and context, applied to the total length), and
// like Send keeps no reference to bufs or their bytes once it returns, so
// the caller may change or reuse them. The RPC layer sends a message with
// a large bytes field this way (rpc.VectorCodec): the frame's header and
// the rest of the encoding in one part, the field's bytes, still in the
// caller's message, in another. tcp:// writes the parts straight to the
// socket when the sender can write its frame at once, and copies what has
// to wait.
type VectorSender interface {
	SendVec(ctx context.Context, bufs [][]byte) error
}

// Replier is implemented by connections whose flow control returns what a
// received message held on the next message sent (rdma://'s credits):
// TryReply releases b, a message received on the connection, and sends
// msg as TrySend would, with what b held returned on msg instead of in a
// message of its own. b is released whether or not msg went. TryAsk sends
// msg as TrySend would, telling the peer that an answer will come by
// TryReply: the connection may then set room aside for that answer, so
// that it takes none of the flow control's window and nothing has to be
// returned for it. The RPC layer sends a keepalive PING by TryAsk and
// answers one by TryReply: an idle connection's round is then a PING and
// a PONG, not two credit returns more.
type Replier interface {
	TryReply(b Buffer, msg []byte) (bool, error)
	TryAsk(msg []byte) (bool, error)
}

// Logged is implemented by listeners that log what they refuse (a failed
// handshake, an oversized first frame, a temporary accept error). The RPC
// server hands its own logger to the listener it serves, so those lines
// reach the operator's log and not a transport's no-op default.
type Logged interface {
	SetLogger(log *zap.Logger)
}

// Secured is implemented by connections that ran transport credentials:
// AuthInfo is what the handshake verified about the peer
// (credentials.TLSInfo), nil when the connection has no credentials. The
// RPC layer puts it in peer.Peer.AuthInfo and in the RequestInfo that
// per-RPC credentials read.
type Secured interface {
	AuthInfo() credentials.AuthInfo
}

// CredentialsDialer is implemented by transports that can secure the
// connections they dial with transport credentials (TLS). The RPC client
// dials through it when it has credentials, and refuses a transport that
// does not implement it rather than dialling in plaintext.
type CredentialsDialer interface {
	DialWithCredentials(ctx context.Context, addr string, creds credentials.TransportCredentials) (Conn, error)
}

// CredentialsListener is implemented by transports that can secure the
// connections they accept with transport credentials. The credentials are
// fixed when listening starts, so no connection is ever handshaken without
// them. rpc.Listen listens through it when given credentials.
type CredentialsListener interface {
	ListenWithCredentials(addr string, creds credentials.TransportCredentials) (Listener, error)
}

// SecuredListener is implemented by listeners that know the transport
// credentials their connections run (nil: none). The RPC server with
// credentials refuses to serve a listener that has none.
type SecuredListener interface {
	Credentials() credentials.TransportCredentials
}

// StreamTransport is implemented by transports that frame messages over
// any byte stream (the TCP transport): the RPC server serves a
// net.Listener, and a client WithContextDialer's connections, through the
// one registered for "tcp".
type StreamTransport interface {
	// NewListener serves the connections nl accepts, each secured by
	// creds (nil: plaintext).
	NewListener(nl net.Listener, creds credentials.TransportCredentials) Listener
	// NewClientConn runs the client's side of the handshake on nc, a
	// connection dialled to authority by other means, secured by creds
	// (nil: plaintext). It closes nc when it fails.
	NewClientConn(ctx context.Context, nc net.Conn, authority string, creds credentials.TransportCredentials) (Conn, error)
}

// Foreign is what a listener of a byte-stream transport accepts when the
// client's first bytes are another protocol's than the transport's framing:
// HTTP/2's client preface (a gRPC client) on tcp:// and unix://. Its
// message methods fail; the server that accepted it takes the byte stream
// over (the RPC server serves "h2" as gRPC), and ends it with Close, which
// the listener counts it until.
type Foreign interface {
	Conn
	// Protocol names what the peer speaks: "h2" when it sent HTTP/2's
	// client preface, which has been read and checked.
	Protocol() string
	// NetConn is the byte stream after the bytes already read (the
	// preface), secured by the listener's credentials if it has any.
	NetConn() net.Conn
}

// Closed returns err wrapped in ErrClosed (unless it already wraps it): the
// reason a transport gives for a connection that closed because of err.
func Closed(err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrClosed, err)
}
