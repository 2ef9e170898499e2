package rpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/rpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Server serves registered services on any number of listeners.
type Server struct {
	opts        serverOptions
	log         *zap.Logger
	interceptor UnaryServerInterceptor

	mu        sync.Mutex
	services  map[string]*service
	listeners map[transport.Listener]bool
	conns     map[*serverLink]bool
	serving   bool
	draining  bool // GracefulStop: no new connections, GOAWAY to old ones
	stopped   bool // Stop: everything closes now
	cv        *sync.Cond
	wg        sync.WaitGroup // Serve loops and connection goroutines
}

type service struct {
	name    string
	impl    any
	methods map[string]*MethodDesc
}

// NewServer returns a server with the given options.
func NewServer(opts ...ServerOption) *Server {
	o := serverOptions{settings: defaultSettings(), maxConcurrentCalls: 1024}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Server{
		opts:        o,
		log:         o.log.Named("rpc.server"),
		interceptor: chainServer(o.interceptors),
		services:    make(map[string]*service),
		listeners:   make(map[transport.Listener]bool),
		conns:       make(map[*serverLink]bool),
	}
	s.cv = sync.NewCond(&s.mu)
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
	svc := &service{name: desc.ServiceName, impl: impl, methods: make(map[string]*MethodDesc)}
	for i := range desc.Methods {
		svc.methods[desc.Methods[i].MethodName] = &desc.Methods[i]
	}
	s.services[desc.ServiceName] = svc
}

// ErrServerStopped is returned by Serve after Stop or GracefulStop.
var ErrServerStopped = errors.New("rpc: the server has been stopped")

// Serve accepts connections on lis and serves them until Stop or
// GracefulStop, when it returns nil, or until lis fails. lis is closed when
// Serve returns.
func (s *Server) Serve(lis transport.Listener) error {
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
	s.log.Info("serving", zap.Stringer("addr", lis.Addr()))
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
		go l.serve()
	}
}

// Stop closes every listener and connection at once: calls in progress are
// canceled, and their clients see Unavailable. It returns when every
// handler has returned.
func (s *Server) Stop() {
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
	for _, l := range conns {
		l.close(status.New(codes.Unavailable, "server stopped"))
	}
	s.wg.Wait()
}

// GracefulStop stops accepting connections, tells every client to go away
// (GOAWAY: no new calls on this connection), lets calls in progress and calls
// already on their way finish, and returns when every client has closed its
// connection. Stop, called meanwhile, cuts it short.
func (s *Server) GracefulStop() {
	s.mu.Lock()
	s.draining = true
	for lis := range s.listeners {
		lis.Close()
	}
	for l := range s.conns {
		l.queueControl(wire.AppendGoAway(nil, 0, "server shutting down"))
	}
	for len(s.conns) > 0 {
		s.cv.Wait()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// serverLink is one client connection: its reader (the serve goroutine)
// starts a goroutine per call.
type serverLink struct {
	*link
	s    *Server
	peer *Peer
	sem  chan struct{} // one token per call running

	mu    sync.Mutex
	calls map[uint64]context.CancelFunc
	wg    sync.WaitGroup // handler goroutines
}

func (s *Server) newServerLink(tc transport.Conn) *serverLink {
	return &serverLink{
		link:  newLink(tc, s.log, s.opts.keepalive),
		s:     s,
		peer:  &Peer{Addr: tc.RemoteAddr(), LocalAddr: tc.LocalAddr()},
		sem:   make(chan struct{}, max(1, s.opts.maxConcurrentCalls)),
		calls: make(map[uint64]context.CancelFunc),
	}
}

// serve reads frames until the connection ends, then cancels the calls
// still running, waits for their handlers and forgets the connection.
func (l *serverLink) serve() {
	defer l.s.wg.Done()
	l.readFrames(l.dispatch)
	l.wg.Wait()
	l.wait()
	s := l.s
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
		l.protocolError(err)
		return false
	}
	switch h.Kind {
	case wire.KindRequest:
		var req wire.Request
		req, err = wire.ParseRequest(body)
		if err != nil {
			// The frame's boundaries are intact, so only this call fails.
			b.Release()
			l.log.Warn("malformed request", zap.Stringer("peer", l.peer.Addr), zap.Uint64("call", h.CallID), zap.Error(err))
			return l.start(h.CallID, "", func(*serverCall, context.Context) (any, error) {
				return nil, status.Errorf(codes.Internal, "malformed request frame: %v", err)
			})
		}
		return l.startCall(h.CallID, req, b)
	case wire.KindCancel:
		err = wire.ParseCancel(body)
		b.Release()
		if err == nil {
			l.mu.Lock()
			cancel := l.calls[h.CallID]
			l.mu.Unlock()
			if cancel != nil {
				cancel()
			}
			return true
		}
	default:
		var ga *wire.GoAway
		ga, err = l.control(h, body, "client", "servers")
		b.Release()
		if err == nil {
			if ga != nil {
				l.log.Warn("client is closing the connection", zap.Stringer("peer", l.peer.Addr), zap.Stringer("code", codes.Code(ga.Code)), zap.String("reason", ga.Message))
			}
			return true
		}
	}
	l.protocolError(err)
	return false
}

// startCall looks the method up and starts its handler. b holds the
// request frame until the handler has decoded it.
func (l *serverLink) startCall(id uint64, req wire.Request, b transport.Buffer) bool {
	svc, md := l.lookup(req.Method)
	if md == nil {
		b.Release()
		err := l.unknownMethod(req.Method, svc)
		l.log.Warn("unknown method", zap.Stringer("peer", l.peer.Addr), zap.String("method", req.Method))
		return l.start(id, req.Method, func(*serverCall, context.Context) (any, error) { return nil, err })
	}
	if n := len(req.Payload); n > l.s.opts.maxRecvSize {
		b.Release()
		err := status.Errorf(codes.ResourceExhausted, "received message of %d bytes is larger than the limit (%d)", n, l.s.opts.maxRecvSize)
		return l.start(id, req.Method, func(*serverCall, context.Context) (any, error) { return nil, err })
	}
	return l.start(id, req.Method, func(sc *serverCall, ctx context.Context) (any, error) {
		if req.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, req.Timeout)
			defer cancel()
		}
		if req.MD != nil {
			ctx = metadata.NewIncomingContext(ctx, req.MD)
		}
		released := false
		defer func() {
			if !released {
				b.Release()
			}
		}()
		dec := func(v any) error {
			if released {
				return status.Error(codes.Internal, "request decoded twice")
			}
			err := l.s.opts.codec.Unmarshal(req.Payload, v)
			// The codec copied what it needs: give the (possibly
			// registered) memory back at once.
			b.Release()
			released = true
			if err != nil {
				return status.Errorf(codes.Internal, "decoding request into %T: %v", v, err)
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // the deadline passed on the way here
		}
		return md.Handler(svc.impl, ctx, dec, l.s.interceptor)
	})
}

func (l *serverLink) lookup(method string) (*service, *MethodDesc) {
	name, m, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
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

// start runs fn as call id in a goroutine of its own and sends its outcome.
// It waits for a free call slot first (backpressure on the client). It
// reports false when the link closed while waiting.
func (l *serverLink) start(id uint64, method string, fn func(*serverCall, context.Context) (any, error)) bool {
	select {
	case l.sem <- struct{}{}:
	case <-l.ctx.Done():
		return false
	}
	ctx, cancel := context.WithCancel(l.ctx)
	l.mu.Lock()
	if _, dup := l.calls[id]; dup {
		l.mu.Unlock()
		cancel()
		<-l.sem
		l.protocolError(fmt.Errorf("call id %d is already in use", id))
		return false
	}
	l.calls[id] = cancel
	l.mu.Unlock()
	sc := &serverCall{method: method, peer: l.peer}
	ctx = context.WithValue(ctx, serverCallKey{}, sc)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		resp, err := l.run(sc, ctx, fn)
		l.mu.Lock()
		delete(l.calls, id)
		l.mu.Unlock()
		cancel()
		l.respond(id, sc, resp, err)
		<-l.sem
	}()
	return true
}

// run calls fn; a panic becomes Internal and one log line with the stack.
func (l *serverLink) run(sc *serverCall, ctx context.Context, fn func(*serverCall, context.Context) (any, error)) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			l.log.Error("handler panicked", zap.String("method", sc.method), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "handler for %s panicked: %v", sc.method, p)
		}
	}()
	return fn(sc, ctx)
}

// respond sends a call's outcome. A response that cannot be encoded or is
// too large becomes an error response.
func (l *serverLink) respond(id uint64, sc *serverCall, resp any, err error) {
	sc.mu.Lock()
	header, trailer := sc.header, sc.trailer
	sc.mu.Unlock()
	if err == nil && resp == nil {
		err = status.Errorf(codes.Internal, "handler for %s returned neither a response nor an error", sc.method)
	}
	if err == nil {
		head := wire.AppendResponseHead(bufpool.Get(128)[:0], id, 0, "", nil, header, trailer)
		err = sendFrame(l.ctx, l.tc, l.s.opts.codec, head, resp, l.s.opts.maxSendSize)
		bufpool.Put(head)
		if err == nil || l.ctx.Err() != nil {
			return
		}
		if _, ok := status.FromError(err); !ok {
			l.log.Info("sending response failed", zap.String("method", sc.method), zap.Error(err))
			return
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
	if len(head) > l.tc.MaxMessageSize() {
		head = wire.AppendResponseHead(head[:0], id, uint32(st.Code()), truncate(st.Message(), 1024), nil, nil, nil)
	}
	if err := l.tc.Send(l.ctx, head); err != nil && l.ctx.Err() == nil {
		l.log.Info("sending error response failed", zap.String("method", sc.method), zap.Error(err))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
