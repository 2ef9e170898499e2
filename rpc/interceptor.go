package rpc

import "context"

// chainServer folds interceptors into one, the first outermost; nil when
// there are none, so the method is called directly.
func chainServer(is []UnaryServerInterceptor) UnaryServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(ctx context.Context, req any, info *UnaryServerInfo, handler UnaryHandler) (any, error) {
		return is[0](ctx, req, info, nextServer(is[1:], info, handler))
	}
}

func nextServer(is []UnaryServerInterceptor, info *UnaryServerInfo, final UnaryHandler) UnaryHandler {
	if len(is) == 0 {
		return final
	}
	return func(ctx context.Context, req any) (any, error) {
		return is[0](ctx, req, info, nextServer(is[1:], info, final))
	}
}

// chainClient folds interceptors around final, the first outermost.
func chainClient(is []UnaryClientInterceptor, final UnaryInvoker) UnaryInvoker {
	for i := len(is) - 1; i >= 0; i-- {
		inner, ic := final, is[i]
		final = func(ctx context.Context, method string, req, reply any, cc *ClientConn, opts ...CallOption) error {
			return ic(ctx, method, req, reply, cc, inner, opts...)
		}
	}
	return final
}

// chainStreamServer folds stream interceptors into one, the first
// outermost; nil when there are none.
func chainStreamServer(is []StreamServerInterceptor) StreamServerInterceptor {
	switch len(is) {
	case 0:
		return nil
	case 1:
		return is[0]
	}
	return func(srv any, ss ServerStream, info *StreamServerInfo, handler StreamHandler) error {
		return is[0](srv, ss, info, nextStreamServer(is[1:], info, handler))
	}
}

func nextStreamServer(is []StreamServerInterceptor, info *StreamServerInfo, final StreamHandler) StreamHandler {
	if len(is) == 0 {
		return final
	}
	return func(srv any, ss ServerStream) error {
		return is[0](srv, ss, info, nextStreamServer(is[1:], info, final))
	}
}

// chainStreamClient folds stream interceptors around final, the first
// outermost.
func chainStreamClient(is []StreamClientInterceptor, final Streamer) Streamer {
	for i := len(is) - 1; i >= 0; i-- {
		inner, ic := final, is[i]
		final = func(ctx context.Context, desc *StreamDesc, cc *ClientConn, method string, opts ...CallOption) (ClientStream, error) {
			return ic(ctx, desc, cc, method, inner, opts...)
		}
	}
	return final
}
