package rpc

import (
	"context"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Default limits, as gRPC-go's.
const (
	DefaultMaxRecvMsgSize = 4 << 20
	DefaultMaxSendMsgSize = 1<<31 - 1
)

// Keepalive makes each end ping a quiet connection, and close it when the
// peer stays silent: this is how a vanished peer is noticed.
type Keepalive struct {
	// Time of silence from the peer after which a ping is sent. Any byte
	// received is a sign of life when the transport counts bytes
	// (transport.Activity), else any frame. Default 30 s on the client,
	// DefaultServerKeepaliveTime (2 h) on the server; a negative value
	// turns keepalive off.
	Time time.Duration
	// Timeout for a sign of life to arrive after the ping, after which the
	// connection is closed: a dead peer is noticed within Time + Timeout.
	// Default 20 s.
	Timeout time.Duration
}

// DefaultServerKeepaliveTime is the server's keepalive Time when none is
// set: gRPC-go's two hours. The client pings a quiet connection after 30 s
// by default and the server answers, which is a sign of life for both
// ends; the server pinging on the same clock too would double an idle
// connection's traffic for nothing. A client that vanishes without a word
// is still noticed: by the kernel's TCP keepalive on the connection (on
// tcp://) or on the RDMA transport's bootstrap connection (on rdma://),
// which Go turns on for every connection, and by the server's response
// watch while a response waits.
const DefaultServerKeepaliveTime = 2 * time.Hour

// serverDefaults is k with the server's default Time.
func (k Keepalive) serverDefaults() Keepalive {
	if k.Time == 0 {
		k.Time = DefaultServerKeepaliveTime
	}
	return k
}

// link is k, with the defaults, as a link takes it.
func (k Keepalive) link() conn.Keepalive {
	k = k.withDefaults()
	return conn.Keepalive{Time: k.Time, Timeout: k.Timeout}
}

func (k Keepalive) withDefaults() Keepalive {
	if k.Time == 0 {
		k.Time = 30 * time.Second
	}
	if k.Timeout <= 0 {
		k.Timeout = 20 * time.Second
	}
	return k
}

// settings are what both ends configure alike.
type settings struct {
	log               *zap.Logger
	codec             Codec
	keepalive         Keepalive
	maxRecvSize       int
	maxSendSize       int
	maxHeaderListSize int
	window            int  // a stream's receive window
	staticWindow      bool // set by the user: the windows do not grow by themselves
	connWindow        int  // bytes of stream messages a connection buffers
	statsHandlers     []stats.Handler
}

// initInbox sets up a stream's receive window: the configured one, which
// grows by itself (conn.Inbox.Grow) up to maxAutoWindow unless the user
// set a window, as gRPC-go's windows grow unless set.
func (s *settings) initInbox(in *conn.Inbox) {
	in.Init(s.window)
	if !s.staticWindow {
		in.Grow(maxAutoWindow)
	}
}

func defaultSettings() settings {
	return settings{
		log:               zap.NewNop(),
		codec:             ProtoCodec{},
		maxRecvSize:       DefaultMaxRecvMsgSize,
		maxSendSize:       DefaultMaxSendMsgSize,
		maxHeaderListSize: wire.DefaultMaxMetadata,
		window:            defaultWindow,
		connWindow:        defaultConnWindow,
	}
}

// Server defaults for what a connection may hold.
const (
	defaultMaxQueuedRequestBytes  = 4 << 20
	defaultMaxUnsentResponseBytes = 4 << 20
	defaultResponseTimeout        = 30 * time.Second
	defaultConnectionTimeout      = 10 * time.Second
	defaultMaxConcurrentCalls     = 100
)

// ServerOption configures a Server. It is an interface, as gRPC-go's, so that
// a type embedding EmptyServerOption is one too.
type ServerOption interface {
	apply(*serverOptions)
}

type serverOptionFunc func(*serverOptions)

func (f serverOptionFunc) apply(o *serverOptions) { f(o) }

type serverOptions struct {
	settings
	interceptors       []UnaryServerInterceptor
	streamInterceptors []StreamServerInterceptor
	maxConcurrentCalls int
	lendRequests       bool // LendRequestBytes
	numWorkers         int  // -1: defaultStreamWorkers
	maxStreams         int
	connTimeout        time.Duration
	maxQueuedBytes     int
	maxUnsentBytes     int
	responseTimeout    time.Duration
	creds              credentials.TransportCredentials
	conn               keepalive.ServerParameters // its idle and age limits
	enforcement        *keepalive.EnforcementPolicy
	waitForHandlers    bool
	unknownHandler     StreamHandler
}

// Logger sets the server's logger. Default zap.NewNop().
func Logger(l *zap.Logger) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.log = l })
}

// UnaryInterceptor appends interceptors to the server's chain; see the
// package documentation for the order.
func UnaryInterceptor(i ...UnaryServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.interceptors = append(o.interceptors, i...) })
}

// LendRequestBytes, with true, lends the bytes of each request to the
// handler instead of copying them: with a codec that can lend
// (LendingCodec; ProtoCodec lends each singular bytes field of the request
// message's own of 1 KiB or more), such a field points into the received
// message. The bytes are valid until the handler returns — for a unary
// request until its response has been sent (returning the request's
// bytes in the response is fine), on a stream until the handler's next
// RecvMsg or its return — and must not be changed. A handler that keeps
// them longer must copy them (bytes.Clone). Compressed requests are
// copied as before. A unary request borrows the memory its message arrived
// in, when the transport can give it up (tcp://: transport.Buffer.Detach),
// else a pooled copy, until its response is sent: the transport's receive
// budget goes back at once either way, so that the connection reads on
// while handlers run.
func LendRequestBytes(lend bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.lendRequests = lend })
}

// lender is the codec to decode a request with lending, nil when
// requests are copied: the option is off, the codec cannot lend, or the
// request is compressed (its bytes are a decompressed copy anyway).
func (o *serverOptions) lender(comp encoding.Compressor) LendingCodec {
	if !o.lendRequests || comp != nil {
		return nil
	}
	lc, _ := o.codec.(LendingCodec)
	return lc
}

// WaitForHandlers, with true, makes Stop wait until every handler has
// returned, as gRPC-go's option of that name does. By default (false)
// Stop returns once the listeners and connections are closed and the
// running handlers' contexts are cancelled, without waiting for them.
func WaitForHandlers(w bool) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.waitForHandlers = w })
}

// UnknownServiceHandler makes h serve every call to a method the server
// has not registered (unknown service or unknown method), as gRPC-go's
// option: h gets a nil implementation and a bidirectional stream; Method
// (or grpc.MethodFromServerStream) on its context names the method. A
// unary call (Invoke) to such a method is served by h too: its request is
// the stream's one message, and h must send one response.
func UnknownServiceHandler(h StreamHandler) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.unknownHandler = h })
}

// MaxRecvMsgSize caps the requests the server takes (ResourceExhausted
// beyond). Default 4 MiB.
func MaxRecvMsgSize(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxRecvSize = n })
}

// MaxSendMsgSize caps the responses the server sends (ResourceExhausted
// beyond).
func MaxSendMsgSize(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxSendSize = n })
}

// ServerCodec sets the codec. Default ProtoCodec.
func ServerCodec(c Codec) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.codec = c })
}

// MaxConcurrentCalls caps the unary calls a server runs at once per
// connection. Requests beyond it wait for a free slot in a queue bounded by
// MaxQueuedRequestBytes, and are refused beyond that; the server keeps
// reading the connection meanwhile, so pings and cancellations are handled
// at once. Fewer may run when their responses, as estimated from the
// method's last ones on the connection, would not fit
// MaxUnsentResponseBytes. What running handlers hold is the application's,
// so this is the bound of last resort on it (docs/architecture.md, "Bounds
// of one connection"). Default 100, as gRPC servers commonly set their
// stream limit.
func MaxConcurrentCalls(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxConcurrentCalls = n })
}

// NumStreamWorkers sets how many long-lived goroutines run the server's
// unary calls, so that a call starts no goroutine and runs on a stack
// already grown; a call that finds them all busy runs on a goroutine of its
// own. Zero means none: a goroutine per call. They start as calls need
// them and end with Stop or GracefulStop. Default max(16, 4×GOMAXPROCS);
// gRPC-go's option of the same name is off by default.
func NumStreamWorkers(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.numWorkers = int(min(n, 1<<16)) })
}

// MaxQueuedRequestBytes bounds the bytes of requests that wait for a call
// slot on one connection (each counts its frame and 256 bytes). A request
// that does not fit is refused before it runs; an rdmarpc client holds it
// until a slot frees and sends it again (docs/wire.md), others see
// Unavailable. One request is always let in when the queue is empty.
// Default 4 MiB.
func MaxQueuedRequestBytes(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxQueuedBytes = n })
}

// MaxUnsentResponseBytes bounds the bytes of encoded responses on one
// connection that the transport has not taken: a response waits for room
// before it is encoded, and new calls wait for a slot while one does. One
// response larger than the bound is let through alone. Default 4 MiB.
func MaxUnsentResponseBytes(n int) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxUnsentBytes = n })
}

// ResponseTimeout is how long responses may wait for a client that takes
// none of them (it does not read) before the server closes the connection,
// with one log line. Default 30 s; a negative value waits forever.
func ResponseTimeout(d time.Duration) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.responseTimeout = d })
}

// MaxHeaderListSize caps the metadata of a request the server takes, each
// entry counting its key, its value and 32 bytes (HTTP/2's rule); a larger
// one fails the call with ResourceExhausted before its metadata is decoded.
// Default 16 KiB, as gRPC's.
func MaxHeaderListSize(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxHeaderListSize = clampInt(n) })
}

func clampInt(n uint32) int { return int(min(uint64(n), 1<<31-1)) }

// DialOption configures a ClientConn.
type DialOption func(*dialOptions)

type dialOptions struct {
	settings
	interceptors       []UnaryClientInterceptor
	streamInterceptors []StreamClientInterceptor
	callOptions        []CallOption
	transport          transport.Transport
	fallback           string
	connect            ConnectParams
	userAgent          string
	creds              credentials.TransportCredentials
	perRPC             []credentials.PerRPCCredentials
	contextDialer      func(context.Context, string) (net.Conn, error)
	serviceConfig      string // WithDefaultServiceConfig's JSON
	resolvers          []resolver.Builder
	idleTimeout        time.Duration
	block              bool // WithBlock: DialContext waits for Ready
	failOnDialError    bool // FailOnNonTempDialError: ... and stops at a failed attempt
	returnConnError    bool // WithReturnConnectionError: ... and says the last failure
	disableRetry       bool // WithDisableRetry: the service config's retry policies are ignored
	maxCallAttempts    int  // WithMaxCallAttempts; 0: defaultMaxCallAttempts
}

// ConnectParams say how a ClientConn dials again after a failed dial, as
// gRPC-go's: it waits a backoff delay between attempts, and calls made
// meanwhile fail at once with Unavailable instead of each dialling.
type ConnectParams struct {
	// Backoff is the delay between attempts. Default backoff.DefaultConfig.
	Backoff backoff.Config
	// MinConnectTimeout is the least time one attempt is given (more when
	// the current backoff delay is longer). Default 20 s.
	MinConnectTimeout time.Duration
}

// WithConnectParams sets how the connection redials.
func WithConnectParams(p ConnectParams) DialOption { return func(o *dialOptions) { o.connect = p } }

// WithMaxHeaderListSize caps the metadata of a response the client takes
// (headers, trailers and status details together, each entry counting 32
// bytes more than its key and value); a larger one fails the call with
// ResourceExhausted before it is decoded. Default 16 KiB, as gRPC's.
func WithMaxHeaderListSize(n uint32) DialOption {
	return func(o *dialOptions) { o.maxHeaderListSize = clampInt(n) }
}

// WithUserAgent puts ua before the user-agent every call sends
// ("ua rdmarpc-go/<Version>"), as gRPC-go's.
func WithUserAgent(ua string) DialOption { return func(o *dialOptions) { o.userAgent = ua } }

// WithLogger sets the client's logger. Default zap.NewNop().
func WithLogger(l *zap.Logger) DialOption { return func(o *dialOptions) { o.log = l } }

// WithUnaryInterceptor appends interceptors to the client's chain; see the
// package documentation for the order.
func WithUnaryInterceptor(i ...UnaryClientInterceptor) DialOption {
	return func(o *dialOptions) { o.interceptors = append(o.interceptors, i...) }
}

// WithDefaultCallOptions applies call options to every call.
func WithDefaultCallOptions(opts ...CallOption) DialOption {
	return func(o *dialOptions) { o.callOptions = append(o.callOptions, opts...) }
}

// WithMaxRecvMsgSize caps the responses the client takes
// (ResourceExhausted beyond). Default 4 MiB.
func WithMaxRecvMsgSize(n int) DialOption { return func(o *dialOptions) { o.maxRecvSize = n } }

// WithMaxSendMsgSize caps the requests the client sends.
func WithMaxSendMsgSize(n int) DialOption { return func(o *dialOptions) { o.maxSendSize = n } }

// WithKeepalive sets the client's keepalive.
func WithKeepalive(k Keepalive) DialOption { return func(o *dialOptions) { o.keepalive = k } }

// WithCodec sets the codec. Default ProtoCodec.
func WithCodec(c Codec) DialOption { return func(o *dialOptions) { o.codec = c } }

// WithFallback makes the connection dial the same address with the
// transport of another scheme ("tcp") when the target's own fails because no
// device serves the address (transport.ErrNoDevice), typically rdma:// on a
// machine without RDMA, and when an established connection over the
// target's own transport fails (the RDMA port went down, the queue pair
// went to error): the backend then reconnects over the fallback at once,
// without a backoff wait, and the calls not yet sent go there. While on the
// fallback it probes the target's own transport with the connect backoff
// and moves new calls back once it connects, draining the fallback
// connection. It logs one line each way (docs/rdma.md, "Failover to TCP
// and back"). The server must serve the fallback on the same address: an
// rdma:// listener serves rdmarpc over TCP on its bootstrap port.
func WithFallback(scheme string) DialOption { return func(o *dialOptions) { o.fallback = scheme } }

// WithTransport dials with t instead of the transport registered for the
// target's scheme (for instance a TCP transport with TLS).
func WithTransport(t transport.Transport) DialOption {
	return func(o *dialOptions) { o.transport = t }
}

// windowSize is a window option's value: below the protocol's initial 64 KiB
// it is raised to it, as gRPC-go ignores smaller windows.
func windowSize(n int32) int { return max(int(n), defaultWindow) }

// InitialWindowSize sets each stream's receive window on the server: the
// bytes of messages a client may send on one stream before the handler
// reads them (docs/wire.md, "Flow control"). Values below 64 KiB, the
// default, are raised to it. Without it, a stream's window starts at 64 KiB
// and grows by itself up to 4 MiB when its messages are large; with it (or
// InitialConnWindowSize), as in gRPC-go, the windows stay as set.
func InitialWindowSize(n int32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.window, o.staticWindow = windowSize(n), true })
}

// InitialConnWindowSize sets the connection window on the server: the
// bytes of stream messages the client may send on one connection, all
// streams together, before handlers have read them. The client waits for
// the window rather than sending past it, so the connection holds at most
// the window plus one message. Values below 64 KiB are raised to it;
// default 16 MiB.
func InitialConnWindowSize(n int32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.connWindow, o.staticWindow = windowSize(n), true })
}

// MaxConcurrentStreams caps the calls and streams open at once on one
// connection, unary calls included (running or queued), as gRPC-go's
// option does. The server tells its clients in its SETTINGS, and a client
// over the limit waits for one of its calls or streams to end before it
// starts another (within the new one's deadline); one that sends more
// anyway is refused with Unavailable and the refusal mark, and a client
// that keeps doing so is disconnected. Default 4096; values below 1 are
// raised to 1.
func MaxConcurrentStreams(n uint32) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.maxStreams = max(1, clampInt(n)) })
}

// ConnectionTimeout bounds how long a new connection may take to start
// talking RPC once the transport accepted it: the client's SETTINGS must
// arrive within it, or the connection is closed, with one (rate-limited)
// log line. Default 10 s, the transports' own handshake timeout (gRPC-go's
// option of the same name defaults to 120 s).
func ConnectionTimeout(d time.Duration) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.connTimeout = d })
}

// StreamInterceptor appends one interceptor to the server's stream chain;
// see the package documentation for the order.
func StreamInterceptor(i StreamServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.streamInterceptors = append(o.streamInterceptors, i) })
}

// ChainStreamInterceptor appends interceptors to the server's stream
// chain, the first outermost.
func ChainStreamInterceptor(is ...StreamServerInterceptor) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.streamInterceptors = append(o.streamInterceptors, is...) })
}

// ChainUnaryInterceptor appends interceptors to the server's unary chain,
// as UnaryInterceptor does.
func ChainUnaryInterceptor(is ...UnaryServerInterceptor) ServerOption { return UnaryInterceptor(is...) }

// JoinServerOptions returns one option that applies opts in order: what a
// package returns when it needs several, as orca.CallMetricsServerOption
// (a unary and a stream interceptor). gRPC-go has it as an internal.
func JoinServerOptions(opts ...ServerOption) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		for _, opt := range opts {
			opt.apply(o)
		}
	})
}

// WithInitialWindowSize sets each stream's receive window on the client
// (see InitialWindowSize).
func WithInitialWindowSize(n int32) DialOption {
	return func(o *dialOptions) { o.window, o.staticWindow = windowSize(n), true }
}

// WithInitialConnWindowSize sets the connection window on the client (see
// InitialConnWindowSize).
func WithInitialConnWindowSize(n int32) DialOption {
	return func(o *dialOptions) { o.connWindow, o.staticWindow = windowSize(n), true }
}

// WithStreamInterceptor appends one interceptor to the client's stream
// chain; see the package documentation for the order.
func WithStreamInterceptor(i StreamClientInterceptor) DialOption {
	return func(o *dialOptions) { o.streamInterceptors = append(o.streamInterceptors, i) }
}

// WithChainStreamInterceptor appends interceptors to the client's stream
// chain, the first outermost.
func WithChainStreamInterceptor(is ...StreamClientInterceptor) DialOption {
	return func(o *dialOptions) { o.streamInterceptors = append(o.streamInterceptors, is...) }
}

// WithChainUnaryInterceptor appends interceptors to the client's unary
// chain, as WithUnaryInterceptor does.
func WithChainUnaryInterceptor(is ...UnaryClientInterceptor) DialOption {
	return WithUnaryInterceptor(is...)
}
