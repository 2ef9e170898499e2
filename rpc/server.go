package rpc

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/h2server"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Server serves registered services on any number of listeners.
type Server struct {
	opts        serverOptions
	log         *zap.Logger
	peerLog     *limitedLogger // lines a peer can cause, rate-limited
	interceptor UnaryServerInterceptor
	// streamInterceptor is the stream chain, nil when empty.
	streamInterceptor StreamServerInterceptor

	mu       sync.Mutex
	services map[string]*service
	// methods are the unary methods by full name ("/pkg.Service/Method"),
	// read without mu once serving (RegisterService panics after Serve).
	methods   map[string]*methodEntry
	workers   workers // run the unary calls
	listeners map[transport.Listener]bool
	conns     map[*serverLink]bool
	serving   bool
	draining  bool // GracefulStop: no new connections, GOAWAY to old ones
	stopped   bool // Stop: everything closes now
	cv        *sync.Cond
	wg        sync.WaitGroup // Serve loops and connection goroutines
	stopOnce  sync.Once      // Stop's wait for the workers' end, when it does not wait itself

	chz *channelz.Server // what channelz shows of it, until Stop or GracefulStop
}

// methodEntry is a unary method as a request names it.
type methodEntry struct {
	name string // "/pkg.Service/Method", the string calls share
	svc  *service
	md   *MethodDesc
}

type service struct {
	name    string
	impl    any
	methods map[string]*MethodDesc
	streams map[string]*StreamDesc
	// metadata is the ServiceDesc's, for GetServiceInfo.
	metadata any
}

// NewServer returns a server with the given options.
func NewServer(opts ...ServerOption) *Server {
	o := serverOptions{
		settings:           defaultSettings(),
		maxConcurrentCalls: defaultMaxConcurrentCalls,
		maxStreams:         defaultMaxConcurrentStreams,
		maxQueuedBytes:     defaultMaxQueuedRequestBytes,
		maxUnsentBytes:     defaultMaxUnsentResponseBytes,
		responseTimeout:    defaultResponseTimeout,
		connTimeout:        defaultConnectionTimeout,
		numWorkers:         -1,
	}
	for _, opt := range opts {
		opt.apply(&o)
	}
	log := o.log.Named("rpc.server")
	s := &Server{
		opts:              o,
		log:               log,
		peerLog:           newLimitedLogger(log, peerLogBurst, peerLogEvery, time.Now),
		interceptor:       chainServer(o.interceptors),
		streamInterceptor: chainStreamServer(o.streamInterceptors),
		services:          make(map[string]*service),
		methods:           make(map[string]*methodEntry),
		listeners:         make(map[transport.Listener]bool),
		conns:             make(map[*serverLink]bool),
	}
	s.cv = sync.NewCond(&s.mu)
	s.chz = channelz.NewServer("")
	if o.numWorkers < 0 {
		o.numWorkers = defaultStreamWorkers()
	}
	s.workers.init(o.numWorkers)
	return s
}

// RegisterService registers impl as the implementation of desc. It panics
// on programming errors, as gRPC-go does: impl not implementing
// desc.HandlerType, a service registered twice, or registration after Serve.
func (s *Server) RegisterService(desc *ServiceDesc, impl any) {
	if impl == nil || reflect.ValueOf(impl).Kind() == reflect.Pointer && reflect.ValueOf(impl).IsNil() {
		panic(fmt.Sprintf("rpc: RegisterService(%s): the implementation is nil", desc.ServiceName))
	}
	if desc.HandlerType != nil {
		ht := reflect.TypeOf(desc.HandlerType).Elem()
		if it := reflect.TypeOf(impl); !it.Implements(ht) {
			panic(fmt.Sprintf("rpc: RegisterService(%s): %v does not implement %v", desc.ServiceName, it, ht))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serving {
		panic(fmt.Sprintf("rpc: RegisterService(%s) after Serve", desc.ServiceName))
	}
	if _, dup := s.services[desc.ServiceName]; dup {
		panic(fmt.Sprintf("rpc: service %s registered twice", desc.ServiceName))
	}
	svc := &service{name: desc.ServiceName, impl: impl, methods: make(map[string]*MethodDesc), streams: make(map[string]*StreamDesc), metadata: desc.Metadata}
	for i := range desc.Methods {
		md := &desc.Methods[i]
		svc.methods[md.MethodName] = md
		name := "/" + desc.ServiceName + "/" + md.MethodName
		s.methods[name] = &methodEntry{name: name, svc: svc, md: md}
	}
	for i := range desc.Streams {
		svc.streams[desc.Streams[i].StreamName] = &desc.Streams[i]
	}
	s.services[desc.ServiceName] = svc
}

// ErrServerStopped is returned by Serve after Stop or GracefulStop.
var ErrServerStopped = errors.New("rpc: the server has been stopped")

// Listener is what Serve takes: a transport.Listener (from Listen, or a
// transport's own Listen), or any net.Listener (a TCP or unix socket, one
// from socket activation, test/bufconn's), which is served with the TCP
// transport's framing, as gRPC-go's Serve takes one.
type Listener interface {
	Close() error
	Addr() net.Addr
}

// Serve accepts connections on lis and serves them until Stop or
// GracefulStop, when it returns nil, or until lis fails. lis is closed when
// Serve returns. With Creds, every connection runs the credentials: a
// net.Listener is secured by Serve, a transport.Listener must have been
// created with them (ListenCreds).
func (s *Server) Serve(l Listener) error {
	var lis transport.Listener
	switch l := l.(type) {
	case transport.Listener:
		lis = l
	case net.Listener:
		var err error
		if lis, err = s.netListener(l); err != nil {
			l.Close()
			return err
		}
	default:
		l.Close()
		return fmt.Errorf("rpc: Serve takes a transport.Listener or a net.Listener, not %T", l)
	}
	if err := s.checkListener(lis); err != nil {
		lis.Close()
		return err
	}
	s.mu.Lock()
	if s.draining || s.stopped {
		s.mu.Unlock()
		lis.Close()
		return ErrServerStopped
	}
	s.serving = true
	s.listeners[lis] = true
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, lis)
		s.mu.Unlock()
		lis.Close()
	}()
	if lg, ok := lis.(transport.Logged); ok {
		// Refusals at the listener reach the operator's log.
		lg.SetLogger(s.opts.log)
	}
	s.log.Info("serving", zap.Stringer("addr", lis.Addr()))
	lisCounters, _ := lis.(transport.Counters)
	scheme := lis.Addr().Network()
	if sc, ok := lis.(interface{ Scheme() string }); ok {
		scheme = sc.Scheme()
	}
	lisInfo := channelz.SocketInfo{Local: lis.Addr(), Transport: scheme}
	if lisCounters != nil {
		lisInfo.Counters = lisCounters.Counters
	}
	defer s.chz.NewListenSocket(lisInfo).Close()
	for {
		tc, err := lis.Accept(context.Background())
		if err != nil {
			s.mu.Lock()
			quitting := s.draining || s.stopped
			s.mu.Unlock()
			if quitting {
				return nil
			}
			return fmt.Errorf("rpc: accept on %v: %w", lis.Addr(), err)
		}
		connScheme := scheme
		if fc, ok := tc.(transport.Foreign); ok {
			if tc = s.foreign(fc); tc == nil {
				continue
			}
			connScheme = "h2" // a gRPC client, on the port's TCP
		}
		s.mu.Lock()
		if s.draining || s.stopped {
			s.mu.Unlock()
			tc.Close()
			continue
		}
		l := s.newServerLink(tc)
		s.conns[l] = true
		s.wg.Add(1)
		s.mu.Unlock()
		l.stats = beginConn(s.opts.statsHandlers, false, tc, lisCounters)
		l.chz = s.chz.NewSocket(socketInfo(tc, connScheme, l.peer.AuthInfo, lisCounters, l.Link))
		go l.serve()
	}
}

// foreign serves a connection whose client speaks another protocol than
// the transport's framing: "h2" (a gRPC client) through h2server, whose
// frames are the rdmarpc frames its streams amount to. Others are closed
// (nil).
func (s *Server) foreign(fc transport.Foreign) transport.Conn {
	if fc.Protocol() != "h2" {
		s.peerLog.warn("closing a connection of an unknown protocol", zap.Stringer("peer", fc.RemoteAddr()), zap.String("protocol", fc.Protocol()))
		fc.Close()
		return nil
	}
	o := &s.opts
	return h2server.New(fc, h2server.Config{
		Unary:                func(m string) bool { return s.methods[m] != nil },
		MaxRecvMsgSize:       o.maxRecvSize,
		MaxHeaderListSize:    uint32(min(o.maxHeaderListSize, 1<<31-1)),
		MaxConcurrentStreams: uint32(min(o.maxStreams, 1<<31-1)),
		StreamWindow:         int32(min(o.window, 1<<31-1)),
		ConnWindow:           int32(min(o.connWindow, 1<<31-1)),
		Log:                  s.log,
	})
}

// Stop closes every listener and connection at once: calls in progress are
// canceled, and their clients see Unavailable. Connections close in
// parallel, so peers that are slow to let go cost one close grace, not one
// each. As gRPC-go's, it returns without waiting for the handlers still
// running (their contexts are cancelled) unless the server was made with
// WaitForHandlers(true), when it returns once every handler has returned.
// Either way each connection's goroutines end after its handlers.
func (s *Server) Stop() {
	s.chz.Close()
	s.mu.Lock()
	s.stopped = true
	for lis := range s.listeners {
		lis.Close()
	}
	conns := make([]*serverLink, 0, len(s.conns))
	for l := range s.conns {
		conns = append(conns, l)
	}
	s.mu.Unlock()
	var closing sync.WaitGroup
	for _, l := range conns {
		closing.Add(1)
		go func() {
			defer closing.Done()
			l.Close(status.New(codes.Unavailable, "server stopped"))
		}()
	}
	closing.Wait()
	if s.opts.waitForHandlers {
		s.wg.Wait()
		s.workers.stop()
		return
	}
	// The workers end once no connection can hand them a call, after the
	// handlers: a goroutine of the Server's waits for that, once.
	s.stopOnce.Do(func() {
		go func() {
			s.wg.Wait()
			s.workers.stop()
		}()
	})
}

// GracefulStop stops accepting connections, tells every client to go away
// (GOAWAY: no new calls on this connection), lets calls in progress and calls
// already on their way finish, and returns when every client has closed its
// connection. Stop, called meanwhile, cuts it short.
func (s *Server) GracefulStop() {
	s.chz.Close()
	s.mu.Lock()
	s.draining = true
	for lis := range s.listeners {
		lis.Close()
	}
	for l := range s.conns {
		l.drain("server shutting down")
	}
	for len(s.conns) > 0 {
		s.cv.Wait()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.workers.stop()
}

// serverLink is one client connection. Its reader (the serve goroutine)
// never waits for anything but the transport: it admits each request as a
// stream (one message each way), starting a handler when a call slot is
// free and queueing it (copied out of transport memory, within a byte
// bound) when not, and it handles CANCEL, PING and GOAWAY at once whatever
// the handlers are doing.
type serverLink struct {
	*conn.Link
	s         *Server
	peer      *Peer
	authority string           // the calls' ":authority"
	budget    *conn.ByteBudget // encoded responses the transport has not taken

	adm         admission     // every request enters here; its lock guards the calls and streams
	held        atomic.Int64  // window bytes of stream messages copied out and not yet read
	lastNotOpen uint64        // the last stream answered "not open" (the reader's)
	lendTo      *serverStream // the lone stream the frame dispatched gave a message, to lend the reading to (the reader's)
	lendFirst   bool          // and its inbox was empty: its handler waits for it
	ownReader   *serverStream // the stream whose handler reads (readOwn; the reader's)
	// streamHandoffs counts stream messages another goroutine than their
	// handler read, for tests.
	streamHandoffs atomic.Uint64
	ownReading     atomic.Int32                        // a handler reads for itself (readOwn), for tests
	refusedIDs     refusedSet                          // streams refused lately, whose frames are dropped (the reader's)
	ests           map[*methodEntry]*conn.RespEstimate // the unary methods' response estimates on this connection (the reader's)
	ua             string                              // the last user-agent received (the reader's)
	accept         string                              // the last grpc-accept-encoding received (the reader's)
	lastPing       time.Time                           // the reader's, for the enforcement policy
	pingStrikes    int                                 // the reader's
	timers         connTimers
	wg             sync.WaitGroup // handler goroutines
	stats          *connStats     // nil without stats handlers
	chz            *channelz.Socket
}

// callStream is one call on a server connection: a stream with one message
// each way. Admission, cancellation and the response budget apply per
// stream. Once started it is also the handler's context (callctx.go).
type callStream struct {
	callCtx
	cc callContext // the values the handler's context answers
	sc serverCall

	id       uint64
	method   string
	req      wire.Request
	frame    transport.Buffer // holds req's bytes until the handler decoded them
	lent     []byte           // the memory they are lent in (the detached frame, or a pooled copy) until the response is sent; nil: none
	deadline time.Time        // zero: none
	fail     error            // the call fails with this before any handler runs
	svc      *service
	md       *MethodDesc
	est      *conn.RespEstimate  // the method's on this connection, nil for an unknown one
	comp     encoding.Compressor // the request's compressor (the response's is sc.comp); nil: none
	ua       string              // the connection's user-agent when it arrived
	accept   string              // the compressors the client advertised (acceptEncoding)

	cost    int           // bytes charged to the queue while queued
	elem    *list.Element // in the queue, nil once started
	started bool          // running: cancelRunning ends it with the link
	counted bool          // counted in open (under l.adm.mu)
	window  int           // connection window the request holds until the call is over (the reader's, then the handler's)
	resv    int           // response budget reserved while it runs (under l.adm.mu, then the handler's)
	decoded bool          // the handler's dec has run
	unread  uint64        // non-zero: runs on the reader, the link unread meanwhile: unreadTurn's run number
}

// queueEntryCost is what a queued request costs on top of its frame: the
// stream and its queue entry.
const queueEntryCost = 256

// requestOverhead is what a REQUEST frame may carry beyond its message and
// metadata: the header, the timeout and the method's name.
const requestOverhead = 1 << 10

func (s *Server) newServerLink(tc transport.Conn) *serverLink {
	watch := conn.SendWatch{After: max(s.opts.responseTimeout, 0), Stuck: func() {
		s.peerLog.warn("closing a connection whose client takes no responses", zap.Stringer("peer", tc.RemoteAddr()), zap.Duration("timeout", s.opts.responseTimeout))
	}}
	ai := authInfo(tc)
	l := &serverLink{
		s:         s,
		peer:      &Peer{Addr: tc.RemoteAddr(), LocalAddr: tc.LocalAddr(), AuthInfo: ai},
		authority: connAuthority(tc, ai),
		budget:    conn.NewByteBudget(s.opts.maxUnsentBytes),
	}
	l.Link = conn.NewLink(tc, conn.LinkConfig{Log: s.log, Keepalive: s.opts.keepalive.serverDefaults().link(), Watch: watch, OnPong: l.drainedCheck})
	l.adm.init(l)
	// A REQUEST costs its whole frame, metadata included, of the window.
	l.Flow.Init(s.opts.connWindow, s.opts.maxRecvSize+s.opts.maxHeaderListSize+requestOverhead)
	return l
}

// serve is the connection's first reader: the SETTINGS exchange, readTurn,
// then, if it handed the reading on to run a call, a worker (adopt).
func (l *serverLink) serve() {
	l.startConnTimers()
	if !l.handshake() {
		l.finish()
		return
	}
	l.readOn()
}

// handshake sends the server's SETTINGS, the first frame of the connection,
// and takes the client's, which must be its first, within the connection
// timeout (docs/wire.md, "SETTINGS"). It reports false, the link closed,
// when the client sent something else or nothing in time.
func (l *serverLink) handshake() bool {
	set := wire.Settings{
		MaxConcurrentStreams: uint32(min(l.s.opts.maxStreams, 1<<32-1)),
		ConnectionWindow:     l.Flow.Settings(),
	}
	if err := l.SendControl(wire.AppendSettings(nil, set)); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(l.Ctx, l.s.opts.connTimeout)
	b, err := l.RecvFrame(ctx)
	cancel()
	if err != nil {
		if err != conn.ErrLinkClosed {
			st := status.Newf(codes.Unavailable, "no SETTINGS from the client within %v", l.s.opts.connTimeout)
			if l.Close(st) {
				l.s.peerLog.warn("closing a connection that did not start", zap.Stringer("peer", l.peer.Addr), zap.Duration("timeout", l.s.opts.connTimeout))
			}
		}
		return false
	}
	defer b.Release()
	h, body, err := wire.ParseHeader(b.Bytes())
	if err == nil && h.Kind != wire.KindSettings {
		err = fmt.Errorf("the client's first frame is %v, not SETTINGS", h.Kind)
	}
	var peer wire.Settings
	if err == nil {
		peer, err = wire.ParseSettings(body)
	}
	if err != nil {
		l.fatal(err)
		return false
	}
	l.Flow.PeerWindow(peer.ConnectionWindow)
	return true
}

// readOn reads l (readTurn) and, if it handed the reading on to run a
// call, becomes a worker (adopt).
func (l *serverLink) readOn() {
	if l.readTurn() {
		l.s.workers.adopt()
	}
}

// readTurn is the reading of l, which s.wg counts: it reads and
// dispatches frames until the connection ends, then finishes the link
// (and reports false). A call a REQUEST admitted runs where
// admission.runInline says; when that handed the reading on (the call
// ran here), it reports true.
func (l *serverLink) readTurn() bool {
	for {
		b, err := l.RecvFrame(l.Ctx)
		if err != nil || !l.dispatch(b) {
			if l.lendTo != nil {
				l.endLend(false)
			}
			l.finish()
			return false
		}
		if l.lendTo != nil && l.endLend(l.lendFirst) {
			return true // the stream's handler reads on (serverStream.readOwn)
		}
		if l.adm.inline != nil && !l.adm.runInline() {
			return true
		}
	}
}

// finish ends l once nothing reads it any more: it cancels the calls still
// running, waits for their handlers and forgets the connection.
func (l *serverLink) finish() {
	defer l.s.wg.Done()
	l.stopConnTimers()
	l.adm.cancelRunning()
	l.wg.Wait()
	l.Wait()
	l.adm.mu.Lock()
	l.adm.dropQueue()
	l.adm.mu.Unlock()
	s := l.s
	l.stats.end()
	l.chz.Close()
	s.mu.Lock()
	delete(s.conns, l)
	s.cv.Broadcast()
	s.mu.Unlock()
}

// dispatch handles one frame; it reports false when the link is closing.
func (l *serverLink) dispatch(b transport.Buffer) bool {
	h, body, err := wire.ParseHeader(b.Bytes())
	if err != nil {
		b.Release()
		l.fatal(err)
		return false
	}
	if h.Kind == wire.KindRequest || h.Kind == wire.KindMessage {
		l.chz.MessageReceived()
	}
	switch h.Kind {
	case wire.KindRequest:
		l.pingStrikes = 0 // pings during calls are fine, as in gRPC-go
		return l.adm.request(h.CallID, body, b)
	case wire.KindOpen:
		l.pingStrikes = 0
		ok := l.openStream(h, body)
		b.Release()
		return ok
	case wire.KindMessage, wire.KindCloseSend, wire.KindReset, wire.KindWindow:
		return l.streamFrame(h, body, b)
	case wire.KindCancel:
		err = wire.ParseCancel(body)
		b.Release()
		if err == nil {
			l.adm.cancel(h.CallID)
			return true
		}
	default:
		if h.Kind == wire.KindPing && !l.pingAllowed(time.Now()) {
			b.Release()
			l.refusePings()
			return false
		}
		var ga *wire.GoAway
		ga, err = l.Control(h, body, b, "client", "servers")
		if err == nil {
			if ga != nil {
				l.s.peerLog.warn("client is closing the connection", zap.Stringer("peer", l.peer.Addr), zap.Stringer("code", codes.Code(ga.Code)), zap.String("reason", ga.Message))
			}
			return true
		}
	}
	l.fatal(err)
	return false
}

// fatal closes the connection for a protocol error, with one
// (rate-limited) log line.
func (l *serverLink) fatal(err error) {
	l.s.peerLog.warn("closing connection", zap.Stringer("peer", l.peer.Addr), zap.Error(err))
	l.ProtocolError(err)
}

// estimate is m's response estimate on this connection. It is the
// connection's own, so that what one client asks for (small answers, to
// bring an estimate down) says nothing of another's calls.
func (l *serverLink) estimate(m *methodEntry) *conn.RespEstimate {
	e := l.ests[m]
	if e == nil {
		if l.ests == nil {
			l.ests = make(map[*methodEntry]*conn.RespEstimate)
		}
		e = new(conn.RespEstimate)
		l.ests[m] = e
	}
	return e
}

// newStream decodes a REQUEST into a stream. A request that cannot be
// served (malformed body, unknown method, too large) becomes a stream that
// fails: the frame's boundaries are intact, so only this call fails.
func (l *serverLink) newStream(id uint64, body []byte, b transport.Buffer) *callStream {
	st := &callStream{id: id, cost: b.Len() + queueEntryCost}
	var known *methodEntry
	req, err := wire.ParseRequestWith(body, l.s.opts.maxHeaderListSize, func(name []byte) string {
		if known = l.s.methods[string(name)]; known != nil {
			return known.name
		}
		return string(name)
	})
	switch {
	case errors.Is(err, wire.ErrMetadataTooLarge):
		st.fail = status.Errorf(codes.ResourceExhausted, "request %v", err)
	case err != nil:
		l.s.peerLog.warn("malformed request", zap.Stringer("peer", l.peer.Addr), zap.Uint64("call", id), zap.Error(err))
		st.fail = status.Errorf(codes.Internal, "malformed request frame: %v", err)
	default:
		st.method = req.Method
		var encName string
		var encOK bool
		st.comp, encName, encOK = takeEncoding(req.MD)
		if known != nil {
			st.svc, st.md, st.est = known.svc, known.md, l.estimate(known)
		} else {
			st.svc, st.md = l.lookup(req.Method)
		}
		if st.md == nil && l.s.opts.unknownHandler != nil {
			st.svc, st.md = unknownService, unknownAsUnary(l.s.opts.unknownHandler, l.s.streamInterceptor, req.Method)
		}
		switch {
		case st.md == nil:
			l.s.peerLog.warn("unknown method", zap.Stringer("peer", l.peer.Addr), zap.String("method", req.Method))
			st.fail = l.unknownMethod(req.Method, st.svc)
		case !encOK:
			st.fail = status.Errorf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", encName)
		case len(req.Payload) > l.s.opts.maxRecvSize:
			st.fail = status.Errorf(codes.ResourceExhausted, "received message of %d bytes is larger than the limit (%d)", len(req.Payload), l.s.opts.maxRecvSize)
		default:
			if req.Timeout > 0 {
				// The deadline runs from arrival, whether the call starts
				// now or waits for a slot.
				st.deadline = time.Now().Add(req.Timeout)
			}
			st.req, st.frame, st.ua, st.accept = req, b, l.userAgent(req.MD), l.acceptEncoding(req.MD)
			return st
		}
	}
	b.Release()
	return st
}

// testHookUnaryEnded, when set, is called once a unary call has left the
// calls and before its response is sent, with whether a draining
// connection could be closed then.
var testHookUnaryEnded atomic.Pointer[func(closable bool)]

// serveStream runs st's handler and sends its outcome.
func (l *serverLink) serveStream(st *callStream) {
	sc := &st.sc
	sc.method, sc.comp, sc.accept = st.method, st.comp, st.accept
	st.cc = callContext{Context: callBase{st}, sc: sc, peer: l.peer, l: l, ua: st.ua}
	if hs := l.s.opts.statsHandlers; len(hs) > 0 && st.fail == nil {
		st.cc.Context = l.beginStats(callBase{st}, hs, st, sc)
	}
	st.start()
	l.chzCallStarted()
	resp, err := l.run(sc, st)
	// Counted as sending before it leaves the calls: a draining
	// connection with neither would be closed under its response.
	l.ResponseStart()
	l.adm.mu.Lock()
	delete(l.adm.calls, st.id)
	l.adm.uncountLocked(&st.counted)
	l.adm.mu.Unlock()
	l.callEnded()
	st.end(context.Canceled)
	if h := testHookUnaryEnded.Load(); h != nil {
		(*h)(l.closable())
	}
	err = l.respond(st, sc, resp, err)
	l.chzCallEnded(err)
	if st.lent != nil {
		bufpool.Put(st.lent) // the response, which may have used them, is sent
		st.lent = nil
	}
	l.ResponseDone()
	l.adm.unreserve(st) // a response that did not go
	l.adm.requestDone(st)
	l.answered()
	if st.unread != 0 {
		l.adm.unread.Answered(st.unread) // the reader reads on: the next request may be here already
	}
	if sc.stats != nil {
		sc.stats.end(err, nil)
	}
}

// beginStats tags a call for the stats handlers, with its request metadata
// in ctx as gRPC-go's server does, and reports its InHeader and Begin.
func (l *serverLink) beginStats(ctx context.Context, hs []stats.Handler, st *callStream, sc *serverCall) context.Context {
	st.req.MD = l.incomingMD(st.req.MD, st.ua) // what the handler will see
	ctx = metadata.NewIncomingContext(ctx, st.req.MD)
	comp := ""
	if st.comp != nil {
		comp = st.comp.Name()
	}
	ctx, sc.stats = beginServerRPC(ctx, hs, l.stats, st.method, nil, comp, st.req.MD, st.frame.Len()-len(st.req.Payload), l.peer)
	return ctx
}

// run calls st's handler; a panic becomes Internal and one log line with
// the stack.
func (l *serverLink) run(sc *serverCall, st *callStream) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.Log.Error("handler panicked", zap.String("method", sc.method), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "handler for %s panicked: %v", sc.method, p)
		}
	}()
	if st.fail != nil {
		return nil, st.fail
	}
	st.cc.raw = st.req.MD
	defer st.frame.Release() // in case the handler never decoded
	dec := st.decode
	if rs := sc.stats; rs != nil {
		// A closure of its own, so that calls without stats handlers
		// keep their smaller one.
		decode := dec
		dec = func(v any) error {
			n, wireLen := len(st.req.Payload), st.frame.Len()
			err := decode(v)
			if err == nil {
				rs.inPayload(v, n, wireLen)
			}
			return err
		}
	}
	if err := st.Err(); err != nil {
		return nil, err // the deadline passed on the way here
	}
	return st.md.Handler(st.svc.impl, st, dec, l.s.interceptor)
}

// decode is a unary handler's dec: it decodes the request into v, once.
func (st *callStream) decode(v any) error {
	if st.decoded {
		return status.Error(codes.Internal, "request decoded twice")
	}
	st.decoded = true
	o := &st.cc.l.s.opts
	var err error
	if lc := o.lender(st.comp); lc != nil {
		// v may point into the bytes, which go to the pool once the
		// response has been sent (serveStream). The frame does not
		// hold on to the transport's receive budget meanwhile, as when
		// the codec copies: the reader needs it to read on (a frame
		// held through the handler could stop the reader from reading
		// what the handler waits for: the peer's window updates for
		// the response). So the frame's memory is detached from the
		// transport (its budget given back) or, where the transport
		// cannot let it go (registered memory), copied to the pool.
		payload := st.req.Payload
		if data, ok := st.frame.Detach(); ok {
			st.lent = data // payload lies in it
		} else {
			st.lent = append(bufpool.Get(len(payload))[:0], payload...)
			payload = st.lent
			st.frame.Release()
		}
		err = lc.UnmarshalLent(payload, v)
	} else {
		err = decodeMsg(o.codec, st.comp, st.req.Payload, o.maxRecvSize, v)
		// The codec copied what it needs: give the (possibly registered)
		// memory back at once.
		st.frame.Release()
	}
	st.req.Payload = nil
	if err != nil {
		return decodeError(err, "request", v)
	}
	return nil
}

// cutMethod splits "/pkg.Service/Method".
func cutMethod(method string) (svc, m string, ok bool) {
	return strings.Cut(strings.TrimPrefix(method, "/"), "/")
}

func (l *serverLink) lookup(method string) (*service, *MethodDesc) {
	name, m, ok := cutMethod(method)
	if !ok {
		return nil, nil
	}
	l.s.mu.Lock()
	svc := l.s.services[name]
	l.s.mu.Unlock()
	if svc == nil {
		return nil, nil
	}
	return svc, svc.methods[m]
}

func (l *serverLink) unknownMethod(method string, svc *service) error {
	if svc != nil {
		_, m, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
		return status.Errorf(codes.Unimplemented, "unknown method %s for service %s", m, svc.name)
	}
	name, _, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok || !strings.HasPrefix(method, "/") {
		return status.Errorf(codes.Unimplemented, "malformed method name %q: want /package.Service/Method", method)
	}
	return status.Errorf(codes.Unimplemented, "unknown service %s", name)
}

// respond sends a call's outcome, within the connection's budget for
// unsent responses. A response that cannot be encoded or is too large
// becomes an error response. It returns the outcome the client was sent.
// The caller counts it as sending (ResponseStart, ResponseDone).
func (l *serverLink) respond(call *callStream, sc *serverCall, resp any, err error) error {
	id := call.id
	sc.mu.Lock()
	header, trailer, comp := sc.header, sc.trailer, sc.comp
	sc.sent = true // SetSendCompressor is too late now
	sc.mu.Unlock()
	if err == nil && resp == nil {
		err = status.Errorf(codes.Internal, "handler for %s returned neither a response nor an error", sc.method)
	}
	if err == nil {
		head := wire.AppendResponseHead(bufpool.Get(128)[:0], id, 0, "", nil, headerWithEncoding(header, comp), trailer)
		var n int
		l.adm.unreserve(call) // the response takes its own size of the budget
		n, err = sendFrame(l.Ctx, l.Conn, sendCodec(l.s.opts.codec, comp), head, resp, l.s.opts.maxSendSize, l.budget, nil, call.est)
		if err == nil {
			l.chz.MessageSent()
		}
		if rs := sc.stats; rs != nil && err == nil {
			rs.outHeader(header, "", nil)
			rs.outPayload(resp, n, len(head)+n)
			rs.outTrailer(trailer, 0)
		}
		bufpool.Put(head)
		if err == nil {
			return nil
		}
		if l.Ctx.Err() != nil {
			return conn.TransportStatus(err).Err()
		}
		if _, ok := status.FromError(err); !ok {
			l.Log.Info("sending response failed", zap.String("method", sc.method), zap.Error(err))
			return conn.TransportStatus(err).Err()
		}
		// Encoding or size failed: the client gets that instead.
	}
	st := status.Convert(err)
	var details [][]byte
	for _, d := range st.RawDetails() {
		if b, err := proto.Marshal(d); err == nil {
			details = append(details, b)
		}
	}
	head := wire.AppendResponseHead(nil, id, uint32(st.Code()), st.Message(), details, header, trailer)
	if len(head) > l.Conn.MaxMessageSize() {
		head = wire.AppendResponseHead(head[:0], id, uint32(st.Code()), truncate(st.Message(), 1024), nil, nil, nil)
	}
	l.adm.unreserve(call)
	if err := l.budget.Acquire(l.Ctx, len(head)); err != nil {
		return st.Err() // the link closed
	}
	defer l.budget.Release(len(head))
	if err := l.Conn.Send(l.Ctx, head); err != nil {
		if l.Ctx.Err() == nil {
			l.Log.Info("sending error response failed", zap.String("method", sc.method), zap.Error(err))
		}
	} else if sc.stats != nil {
		sc.stats.outHeader(header, "", nil)
		sc.stats.outTrailer(trailer, len(head))
	}
	return st.Err()
}

// The refusal mark: a RESPONSE with code Unavailable and this trailer says
// the server refused the call before running it (docs/wire.md).
const refusedKey = "rdmarpc-refused"

var (
	refusedTrailer = metadata.Pairs(refusedKey, "1")
	refusedMessage = "server busy: too many requests waiting on this connection"
)

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
