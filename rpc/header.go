package rpc

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/status"

	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/internal/ctxkey"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// serverCall carries what a handler may add to its response: headers and
// trailers. It travels in the handler's context.
type serverCall struct {
	method  string
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
	sent    bool // SendHeader was called: the header is final
	// comp is the compressor of the response's messages (nil: none),
	// the request's unless SetSendCompressor chose another; accept is the
	// client's grpc-accept-encoding, the names it can decompress.
	comp   encoding.Compressor
	accept string
	stats  *rpcStats     // nil without stats handlers
	stream *serverStream // the stream, nil for a unary call
}

type serverCallKey struct{}

// callContext is a handler's context: the call's serverCall, incoming
// metadata (metadata.FromIncomingContext) and peer (peer.FromContext) in
// one value, where three context.WithValue layers would cost three
// allocations per call. The incoming metadata is completed (incomingMD)
// when first asked for, so a call whose code never reads it does not pay
// for the entries the server adds.
type callContext struct {
	context.Context
	sc   *serverCall
	peer *Peer
	l    *serverLink
	raw  metadata.MD // as decoded, or nil
	ua   string      // the connection's user-agent when the request arrived
	once sync.Once
	md   metadata.MD // raw completed, once asked for
}

func (c *callContext) Value(key any) any {
	switch key.(type) {
	case serverCallKey:
		return c.sc
	case ctxkey.IncomingMD:
		c.once.Do(func() { c.md = c.l.incomingMD(c.raw, c.ua) })
		return c.md
	case ctxkey.Peer:
		return c.peer
	}
	return c.Context.Value(key)
}

func callFromContext(ctx context.Context) (*serverCall, error) {
	c, ok := ctx.Value(serverCallKey{}).(*serverCall)
	if !ok {
		return nil, errors.New("rpc: not a server handler's context")
	}
	return c, nil
}

// SetHeader adds md to the response headers of the call ctx belongs to.
// Headers travel with the response, so they can be set until the handler
// returns, unless SendHeader made them final.
func SetHeader(ctx context.Context, md metadata.MD) error {
	c, err := callFromContext(ctx)
	if err != nil {
		return err
	}
	if md, err = handlerMD(md); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent {
		return errors.New("rpc: SetHeader after SendHeader")
	}
	c.header = metadata.Join(c.header, md)
	return nil
}

// SendHeader adds md to the response headers and makes them final. For a
// unary call they still travel with the response.
func SendHeader(ctx context.Context, md metadata.MD) error {
	if err := SetHeader(ctx, md); err != nil {
		return err
	}
	c, _ := callFromContext(ctx)
	c.mu.Lock()
	c.sent = true
	c.mu.Unlock()
	return nil
}

// SetTrailer adds md to the response trailers.
func SetTrailer(ctx context.Context, md metadata.MD) error {
	c, err := callFromContext(ctx)
	if err != nil {
		return err
	}
	if md, err = handlerMD(md); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trailer = metadata.Join(c.trailer, md)
	return nil
}

// Method returns the full method name of the call ctx belongs to.
func Method(ctx context.Context) (string, bool) {
	c, err := callFromContext(ctx)
	if err != nil {
		return "", false
	}
	return c.method, true
}

// handlerMD is md, metadata a handler sets as headers or trailers,
// without the keys gRPC reserves for itself (pseudo-headers such as
// ":authority", "content-type", "user-agent", "te", "grpc-status" and the
// other grpc- keys the protocol sets), which gRPC-go skips too: a handler
// may echo its incoming metadata. md is copied only when it holds one.
// Invalid metadata is an Internal status error, as in gRPC-go.
func handlerMD(md metadata.MD) (metadata.MD, error) {
	for k := range md {
		if reservedKey(k) {
			clean := make(metadata.MD, len(md))
			for k, v := range md {
				if !reservedKey(k) {
					clean[k] = v
				}
			}
			md = clean
			break
		}
	}
	if err := wire.CheckMD(md); err != nil {
		return nil, status.Errorf(codes.Internal, "rpc: invalid metadata set by the handler: %v", err)
	}
	return md, nil
}

// reservedKey reports whether k is a key gRPC's transport owns, as
// gRPC-go's isReservedHeader.
func reservedKey(k string) bool {
	if strings.HasPrefix(k, ":") {
		return true
	}
	switch k {
	case "content-type", "user-agent", "te", "grpc-message-type", "grpc-encoding",
		"grpc-message", "grpc-status", "grpc-timeout", "grpc-status-details-bin":
		return true
	}
	return false
}
