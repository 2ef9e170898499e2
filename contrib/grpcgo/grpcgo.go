package grpcgo

import (
	"context"
	"io"
	"reflect"

	"google.golang.org/grpc"
	gcodes "google.golang.org/grpc/codes"
	gencoding "google.golang.org/grpc/encoding"
	gmetadata "google.golang.org/grpc/metadata"
	gpeer "google.golang.org/grpc/peer"
	gstatus "google.golang.org/grpc/status"

	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// NewClient returns cc as gRPC-go's ClientConnInterface, for stubs that
// protoc-gen-go-grpc generated: NewHealthClient(grpcgo.NewClient(cc)).
func NewClient(cc rpc.ClientConnInterface) grpc.ClientConnInterface { return client{cc} }

type client struct{ cc rpc.ClientConnInterface }

func (c client) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	o, err := callOptions(opts)
	if err != nil {
		return o.finish(err)
	}
	err = c.cc.Invoke(outgoing(ctx), method, args, reply, o.opts...)
	o.copyOut(nil)
	return o.finish(toGRPC(err))
}

func (c client) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	o, err := callOptions(opts)
	if err != nil {
		return nil, o.finish(err)
	}
	d := &rpc.StreamDesc{StreamName: desc.StreamName, ServerStreams: desc.ServerStreams, ClientStreams: desc.ClientStreams}
	cs, err := c.cc.NewStream(outgoing(ctx), d, method, o.opts...)
	if err != nil {
		o.copyOut(nil)
		return nil, o.finish(toGRPC(err))
	}
	return &clientStream{cs: cs, o: o, single: !desc.ServerStreams}, nil
}

// outgoing adds gRPC-go's outgoing metadata in ctx to rdmarpc's.
func outgoing(ctx context.Context) context.Context {
	gmd, ok := gmetadata.FromOutgoingContext(ctx)
	if !ok || len(gmd) == 0 {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewOutgoingContext(ctx, metadata.Join(md, metadata.MD(gmd)))
}

// opts is what gRPC-go's call options of one call translate to: rdmarpc's
// call options, and where to copy the results that gRPC-go's types hold.
type opts struct {
	opts     []rpc.CallOption
	header   *gmetadata.MD
	trailer  *gmetadata.MD
	peer     *gpeer.Peer
	ourPeer  peer.Peer
	ourHead  metadata.MD
	ourTrail metadata.MD
	onFinish []func(error)
}

func callOptions(gopts []grpc.CallOption) (*opts, error) {
	o := &opts{}
	for _, g := range gopts {
		switch g := g.(type) {
		case grpc.HeaderCallOption:
			o.header = g.HeaderAddr
			o.opts = append(o.opts, rpc.Header(&o.ourHead))
		case grpc.TrailerCallOption:
			o.trailer = g.TrailerAddr
			o.opts = append(o.opts, rpc.Trailer(&o.ourTrail))
		case grpc.PeerCallOption:
			o.peer = g.PeerAddr
			o.opts = append(o.opts, rpc.PeerOption(&o.ourPeer))
		case grpc.FailFastCallOption:
			o.opts = append(o.opts, rpc.WaitForReady(!g.FailFast))
		case grpc.MaxRecvMsgSizeCallOption:
			o.opts = append(o.opts, rpc.MaxCallRecvMsgSize(g.MaxRecvMsgSize))
		case grpc.MaxSendMsgSizeCallOption:
			o.opts = append(o.opts, rpc.MaxCallSendMsgSize(g.MaxSendMsgSize))
		case grpc.PerRPCCredsCallOption:
			// gRPC-go's PerRPCCredentials has rdmarpc's methods.
			o.opts = append(o.opts, rpc.PerRPCCredentials(g.Creds))
		case grpc.OnFinishCallOption:
			o.onFinish = append(o.onFinish, g.OnFinish)
		case grpc.StaticMethodCallOption:
			// A metrics label in gRPC-go; nothing to do.
		case grpc.ContentSubtypeCallOption:
			if g.ContentSubtype != "proto" {
				return o, gstatus.Errorf(gcodes.InvalidArgument, "grpcgo: CallContentSubtype(%q): rdmarpc encodes with the connection's codec (rpc.WithCodec); only \"proto\" is accepted", g.ContentSubtype)
			}
		case grpc.CompressorCallOption:
			useGRPCCompressor(g.CompressorType)
			o.opts = append(o.opts, rpc.UseCompressor(g.CompressorType))
		default:
			if embedsEmptyCallOption(g) {
				// A user's option, as gRPC-go lets users write: it does
				// nothing to the call there either (an interceptor may
				// look for it).
				continue
			}
			return o, gstatus.Errorf(gcodes.InvalidArgument, "grpcgo: gRPC-go's call option %T has no rdmarpc equivalent", g)
		}
	}
	return o, nil
}

// copyOut stores the call's headers, trailers and peer where gRPC-go's
// options asked; head, when not nil, is a stream's headers.
func (o *opts) copyOut(head metadata.MD) {
	if o.header != nil {
		if head == nil {
			head = o.ourHead
		}
		*o.header = gmetadata.MD(head)
	}
	if o.trailer != nil {
		*o.trailer = gmetadata.MD(o.ourTrail)
	}
	if o.peer != nil && o.ourPeer.Addr != nil {
		*o.peer = gpeer.Peer{Addr: o.ourPeer.Addr, LocalAddr: o.ourPeer.LocalAddr, AuthInfo: o.ourPeer.AuthInfo}
	}
}

func (o *opts) finish(err error) error {
	for _, f := range o.onFinish {
		f(err)
	}
	return err
}

// statusError is an rdmarpc status error that gRPC-go's status package
// reads too (by its GRPCStatus method); rdmarpc's finds the error it wraps.
type statusError struct {
	err error
	s   *gstatus.Status
}

func (e *statusError) Error() string               { return e.err.Error() }
func (e *statusError) Unwrap() error               { return e.err }
func (e *statusError) GRPCStatus() *gstatus.Status { return e.s }

// toGRPC makes err, an rdmarpc call's error, one that gRPC-go's status
// package reads as the same status. io.EOF, which ends a stream, stays
// itself.
func toGRPC(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	s := status.Convert(err)
	return &statusError{err: err, s: gstatus.FromProto(s.Proto())}
}

type clientStream struct {
	cs     rpc.ClientStream
	o      *opts
	single bool // the server sends one response, which ends the call
	done   bool
}

func (s *clientStream) Header() (gmetadata.MD, error) {
	md, err := s.cs.Header()
	return gmetadata.MD(md), toGRPC(err)
}

func (s *clientStream) Trailer() gmetadata.MD { return gmetadata.MD(s.cs.Trailer()) }

func (s *clientStream) CloseSend() error { return toGRPC(s.cs.CloseSend()) }

func (s *clientStream) Context() context.Context { return s.cs.Context() }

func (s *clientStream) SendMsg(m any) error { return toGRPC(s.cs.SendMsg(m)) }

// RecvMsg ends the call, for its call options, when it returns an error or
// the single response of a stream that has one.
func (s *clientStream) RecvMsg(m any) error {
	err := s.cs.RecvMsg(m)
	if (err != nil || s.single) && !s.done {
		s.done = true
		head, _ := s.cs.Header()
		s.o.ourTrail = s.cs.Trailer()
		s.o.copyOut(head)
		if err == nil || err == io.EOF {
			s.o.finish(nil)
		} else {
			s.o.finish(toGRPC(err))
		}
	}
	return toGRPC(err)
}

// NewServer returns s as gRPC-go's ServiceRegistrar, for the Register
// functions of stubs protoc-gen-go-grpc generated:
// RegisterHealthServer(grpcgo.NewServer(s), impl).
func NewServer(s rpc.ServiceRegistrar) grpc.ServiceRegistrar { return server{s} }

type server struct{ s rpc.ServiceRegistrar }

func (s server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := &rpc.ServiceDesc{
		ServiceName: desc.ServiceName,
		HandlerType: desc.HandlerType,
		Metadata:    desc.Metadata,
	}
	for _, m := range desc.Methods {
		d.Methods = append(d.Methods, rpc.MethodDesc{MethodName: m.MethodName, Handler: unary(desc.ServiceName, m)})
	}
	for _, st := range desc.Streams {
		d.Streams = append(d.Streams, rpc.StreamDesc{
			StreamName:    st.StreamName,
			Handler:       stream(desc.ServiceName, st),
			ServerStreams: st.ServerStreams,
			ClientStreams: st.ClientStreams,
		})
	}
	s.s.RegisterService(d, impl)
}

func unary(service string, m grpc.MethodDesc) rpc.MethodHandler {
	method := "/" + service + "/" + m.MethodName
	return func(srv any, ctx context.Context, dec func(any) error, interceptor rpc.UnaryServerInterceptor) (any, error) {
		var gi grpc.UnaryServerInterceptor
		if interceptor != nil {
			gi = func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				return interceptor(ctx, req, &rpc.UnaryServerInfo{Server: info.Server, FullMethod: info.FullMethod}, rpc.UnaryHandler(handler))
			}
		}
		return m.Handler(srv, incoming(ctx, unaryStream{ctx: ctx, method: method}), dec, gi)
	}
}

func stream(service string, d grpc.StreamDesc) rpc.StreamHandler {
	method := "/" + service + "/" + d.StreamName
	return func(srv any, ss rpc.ServerStream) error {
		return d.Handler(srv, &serverStream{ss: ss, ctx: incoming(ss.Context(), streamTransport{ss: ss, method: method})})
	}
}

// StreamHandler makes h, a gRPC-go stream handler, an rdmarpc one: for
// rpc.UnknownServiceHandler(grpcgo.StreamHandler(h)), what gRPC-go's
// grpc.UnknownServiceHandler(h) is. grpc.MethodFromServerStream names the
// method the stream was opened on.
func StreamHandler(h grpc.StreamHandler) rpc.StreamHandler {
	return func(srv any, ss rpc.ServerStream) error {
		method, _ := rpc.Method(ss.Context())
		return h(srv, &serverStream{ss: ss, ctx: incoming(ss.Context(), streamTransport{ss: ss, method: method})})
	}
}

// incoming adds to a handler's context what gRPC-go's packages look for:
// the incoming metadata, the peer, and the stream grpc.SetHeader,
// SendHeader, SetTrailer and Method use.
func incoming(ctx context.Context, sts grpc.ServerTransportStream) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = gmetadata.NewIncomingContext(ctx, gmetadata.MD(md))
	}
	if p, ok := peer.FromContext(ctx); ok {
		ctx = gpeer.NewContext(ctx, &gpeer.Peer{Addr: p.Addr, LocalAddr: p.LocalAddr, AuthInfo: p.AuthInfo})
	}
	return grpc.NewContextWithServerTransportStream(ctx, sts)
}

// unaryStream is a unary call's grpc.ServerTransportStream: rdmarpc's
// functions on the handler's context.
type unaryStream struct {
	ctx    context.Context
	method string
}

func (u unaryStream) Method() string                   { return u.method }
func (u unaryStream) SetHeader(md gmetadata.MD) error  { return rpc.SetHeader(u.ctx, metadata.MD(md)) }
func (u unaryStream) SendHeader(md gmetadata.MD) error { return rpc.SendHeader(u.ctx, metadata.MD(md)) }
func (u unaryStream) SetTrailer(md gmetadata.MD) error { return rpc.SetTrailer(u.ctx, metadata.MD(md)) }

// streamTransport is a stream's grpc.ServerTransportStream.
type streamTransport struct {
	ss     rpc.ServerStream
	method string
}

func (t streamTransport) Method() string                   { return t.method }
func (t streamTransport) SetHeader(md gmetadata.MD) error  { return t.ss.SetHeader(metadata.MD(md)) }
func (t streamTransport) SendHeader(md gmetadata.MD) error { return t.ss.SendHeader(metadata.MD(md)) }
func (t streamTransport) SetTrailer(md gmetadata.MD) error {
	t.ss.SetTrailer(metadata.MD(md))
	return nil
}

// serverStream is an rdmarpc server stream as gRPC-go's.
type serverStream struct {
	ss  rpc.ServerStream
	ctx context.Context
}

func (s *serverStream) SetHeader(md gmetadata.MD) error  { return s.ss.SetHeader(metadata.MD(md)) }
func (s *serverStream) SendHeader(md gmetadata.MD) error { return s.ss.SendHeader(metadata.MD(md)) }
func (s *serverStream) SetTrailer(md gmetadata.MD)       { s.ss.SetTrailer(metadata.MD(md)) }
func (s *serverStream) Context() context.Context         { return s.ctx }
func (s *serverStream) SendMsg(m any) error              { return toGRPC(s.ss.SendMsg(m)) }
func (s *serverStream) RecvMsg(m any) error              { return toGRPC(s.ss.RecvMsg(m)) }

// useGRPCCompressor registers with rdmarpc's encoding the compressor
// registered with gRPC-go's under name, unless rdmarpc has one of that
// name: a program that imports google.golang.org/grpc/encoding/gzip, as
// gRPC-go programs do, compresses over rdmarpc without importing
// rdmarpc's. The two Compressor interfaces have the same methods.
func useGRPCCompressor(name string) {
	if name == "" || name == encoding.Identity || encoding.GetCompressor(name) != nil {
		return
	}
	if c := gencoding.GetCompressor(name); c != nil {
		encoding.RegisterCompressor(c)
	}
}

var emptyCallOption = reflect.TypeFor[grpc.EmptyCallOption]()

// embedsEmptyCallOption reports whether o is a struct (or a pointer to
// one) that embeds grpc.EmptyCallOption: a user's CallOption, whose
// methods are EmptyCallOption's no-ops.
func embedsEmptyCallOption(o grpc.CallOption) bool {
	t := reflect.TypeOf(o)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		if f := t.Field(i); f.Anonymous && f.Type == emptyCallOption {
			return true
		}
	}
	return false
}
