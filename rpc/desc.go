package rpc

import "context"

// SupportPackageIsVersionN is referenced by code generated for version N of
// this package's API: code generated for a newer version fails to compile,
// naming the constant, instead of failing obscurely or misbehaving. Older
// versions stay defined, so older generated code keeps compiling.
const (
	SupportPackageIsVersion1 = true // unary methods
	SupportPackageIsVersion2 = true // streaming methods: ServiceDesc.Streams, NewStream
)

// MethodHandler runs one unary method: it decodes the request with dec, then
// calls the service implementation srv, through interceptor when it is not nil.
// Generated code provides one per method.
type MethodHandler func(srv any, ctx context.Context, dec func(any) error, interceptor UnaryServerInterceptor) (any, error)

// MethodDesc describes one unary method of a service.
type MethodDesc struct {
	MethodName string // "Get", not the full name
	Handler    MethodHandler
}

// ServiceDesc describes a service: what generated code passes to
// RegisterService.
type ServiceDesc struct {
	ServiceName string // fully qualified: "kv.v1.KV"
	// HandlerType is a nil pointer to the service's server interface; the
	// implementation registered must implement it.
	HandlerType any
	Methods     []MethodDesc
	// Streams are the streaming methods.
	Streams  []StreamDesc
	Metadata any // the .proto file the service came from
}

// ServiceRegistrar registers services; *Server is one. Generated
// RegisterXServer functions take it.
type ServiceRegistrar interface {
	RegisterService(desc *ServiceDesc, impl any)
}

// ClientConnInterface is what generated clients call through; *ClientConn is
// one, and tests may supply another.
type ClientConnInterface interface {
	// Invoke makes a unary call.
	Invoke(ctx context.Context, method string, req, reply any, opts ...CallOption) error
	// NewStream opens a stream for a streaming method.
	NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error)
}

// UnaryServerInfo tells a server interceptor what is being called.
type UnaryServerInfo struct {
	Server     any    // the service implementation
	FullMethod string // "/kv.v1.KV/Get"
}

// UnaryHandler is the rest of the server chain, ending in the method.
type UnaryHandler func(ctx context.Context, req any) (any, error)

// UnaryServerInterceptor wraps a server call. It may inspect or change ctx and
// req, call handler (or not), and inspect or replace the result.
type UnaryServerInterceptor func(ctx context.Context, req any, info *UnaryServerInfo, handler UnaryHandler) (resp any, err error)

// UnaryInvoker is the rest of the client chain, ending in the network call.
type UnaryInvoker func(ctx context.Context, method string, req, reply any, cc *ClientConn, opts ...CallOption) error

// UnaryClientInterceptor wraps a client call.
type UnaryClientInterceptor func(ctx context.Context, method string, req, reply any, cc *ClientConn, invoker UnaryInvoker, opts ...CallOption) error
