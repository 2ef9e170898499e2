package rpc

import (
	"context"

	"github.com/rdmarpc/rdmarpc/metadata"
)

// The stream API, in gRPC-go's shape, so that generated code for streaming
// methods, and code written against it, compiles unchanged. The runtime is
// in clientstream.go and serverstream.go, flow control in rpc/internal/conn, the
// frames in docs/wire.md.

// StreamHandler runs one streaming method on the server: generated code
// provides one per streaming method, which calls the service implementation
// srv with stream, wrapped in the method's typed stream.
type StreamHandler func(srv any, stream ServerStream) error

// StreamDesc describes one streaming method. StreamName and Handler are used
// by the server; ServerStreams and ClientStreams by both ends, and at least
// one of them is true.
type StreamDesc struct {
	StreamName string        // "Watch", not the full name
	Handler    StreamHandler // runs the method on the server
	// ServerStreams says the server may send many messages, ClientStreams
	// the client.
	ServerStreams bool
	ClientStreams bool
}

// ClientStream is the client's end of one stream. SendMsg and RecvMsg may be
// called from two goroutines at once (one each), but neither from two.
//
// As in gRPC-go, a caller done with a stream cancels its context or calls
// RecvMsg until it returns a non-nil error: messages the server sent before
// ending the stream wait for RecvMsg, counted against the connection's
// window (WithInitialConnWindowSize), until one of the two.
type ClientStream interface {
	// Header waits for the server's header metadata and returns it; it
	// fails when the stream ends before any header came.
	Header() (metadata.MD, error)
	// Trailer returns the server's trailer metadata; it is complete once
	// RecvMsg has returned an error (io.EOF included).
	Trailer() metadata.MD
	// CloseSend half-closes the stream: the client sends no more messages.
	CloseSend() error
	// Context is the stream's context; it is done when the stream ends.
	Context() context.Context
	// SendMsg sends m. An error from the server side shows as io.EOF here;
	// RecvMsg then returns the stream's status.
	SendMsg(m any) error
	// RecvMsg receives the next message into m. It returns io.EOF when the
	// server ended the stream with an OK status, and the status error
	// otherwise.
	RecvMsg(m any) error
}

// ServerStream is the server's end of one stream, given to a StreamHandler.
// The handler's return ends the stream, with its error as the status (nil is
// OK).
type ServerStream interface {
	// SetHeader adds md to the header metadata, sent with the first message
	// or by SendHeader, whichever comes first.
	SetHeader(md metadata.MD) error
	// SendHeader sends the header metadata, md added, at once; at most once.
	SendHeader(md metadata.MD) error
	// SetTrailer adds md to the trailer metadata, sent when the handler
	// returns.
	SetTrailer(md metadata.MD)
	// Context is the stream's context, with the client's deadline and
	// metadata; it is cancelled when the client cancels.
	Context() context.Context
	// SendMsg sends m to the client.
	SendMsg(m any) error
	// RecvMsg receives the client's next message into m; io.EOF when the
	// client has half-closed the stream.
	RecvMsg(m any) error
}

// ServerStreamingClient is the client's end of a server-streaming method: one
// request, then many responses.
type ServerStreamingClient[Res any] interface {
	// Recv returns the next response; io.EOF when the stream ended with an
	// OK status, the status error otherwise.
	Recv() (*Res, error)
	ClientStream
}

// ServerStreamingServer is the server's end of a server-streaming method. The
// handler ends the stream by returning.
type ServerStreamingServer[Res any] interface {
	// Send sends one response. An error means the stream is over and the
	// handler should return.
	Send(*Res) error
	ServerStream
}

// ClientStreamingClient is the client's end of a client-streaming method:
// many requests, then one response.
type ClientStreamingClient[Req any, Res any] interface {
	// Send sends one request. When the stream has ended on the server's
	// side it returns io.EOF, and CloseAndRecv returns the status.
	Send(*Req) error
	// CloseAndRecv half-closes the stream and waits for the response. Call
	// it once, after the last Send.
	CloseAndRecv() (*Res, error)
	ClientStream
}

// ClientStreamingServer is the server's end of a client-streaming method.
// The handler calls SendAndClose once and returns nil, or returns an error
// without calling it.
type ClientStreamingServer[Req any, Res any] interface {
	// Recv returns the next request; io.EOF once the client has closed its
	// side.
	Recv() (*Req, error)
	// SendAndClose sends the one response.
	SendAndClose(*Res) error
	ServerStream
}

// BidiStreamingClient is the client's end of a bidirectional-streaming
// method: many requests and many responses, in any interleaving.
type BidiStreamingClient[Req any, Res any] interface {
	// Send sends one request; io.EOF when the stream has ended on the
	// server's side, whose status Recv then returns.
	Send(*Req) error
	// Recv returns the next response; io.EOF when the stream ended with an
	// OK status, the status error otherwise.
	Recv() (*Res, error)
	ClientStream
}

// BidiStreamingServer is the server's end of a bidirectional-streaming
// method. The handler ends the stream by returning.
type BidiStreamingServer[Req any, Res any] interface {
	// Recv returns the next request; io.EOF once the client has closed its
	// side.
	Recv() (*Req, error)
	// Send sends one response.
	Send(*Res) error
	ServerStream
}

// GenericClientStream gives a ClientStream the typed methods of
// ServerStreamingClient, ClientStreamingClient and BidiStreamingClient.
// Generated code wraps every client stream in one.
type GenericClientStream[Req any, Res any] struct {
	ClientStream
}

var (
	_ ServerStreamingClient[int]         = (*GenericClientStream[string, int])(nil)
	_ ClientStreamingClient[string, int] = (*GenericClientStream[string, int])(nil)
	_ BidiStreamingClient[string, int]   = (*GenericClientStream[string, int])(nil)
)

// Send sends m.
func (x *GenericClientStream[Req, Res]) Send(m *Req) error { return x.ClientStream.SendMsg(m) }

// Recv receives the next message.
func (x *GenericClientStream[Req, Res]) Recv() (*Res, error) {
	m := new(Res)
	if err := x.ClientStream.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// CloseAndRecv half-closes the stream, then receives the one response.
func (x *GenericClientStream[Req, Res]) CloseAndRecv() (*Res, error) {
	if err := x.ClientStream.CloseSend(); err != nil {
		return nil, err
	}
	return x.Recv()
}

// GenericServerStream gives a ServerStream the typed methods of
// ServerStreamingServer, ClientStreamingServer and BidiStreamingServer.
// Generated handlers wrap every server stream in one.
type GenericServerStream[Req any, Res any] struct {
	ServerStream
}

var (
	_ ServerStreamingServer[int]         = (*GenericServerStream[string, int])(nil)
	_ ClientStreamingServer[string, int] = (*GenericServerStream[string, int])(nil)
	_ BidiStreamingServer[string, int]   = (*GenericServerStream[string, int])(nil)
)

// Send sends m.
func (x *GenericServerStream[Req, Res]) Send(m *Res) error { return x.ServerStream.SendMsg(m) }

// SendAndClose sends the one response of a client-streaming method; the
// stream ends when the handler returns.
func (x *GenericServerStream[Req, Res]) SendAndClose(m *Res) error { return x.ServerStream.SendMsg(m) }

// Recv receives the next message.
func (x *GenericServerStream[Req, Res]) Recv() (*Req, error) {
	m := new(Req)
	if err := x.ServerStream.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// StreamServerInfo tells a stream server interceptor what is being called.
type StreamServerInfo struct {
	FullMethod     string // "/kv.v1.KV/Watch"
	IsClientStream bool   // the client sends many messages
	IsServerStream bool   // the server sends many messages
}

// StreamServerInterceptor wraps a streaming method on the server. It may
// wrap ss (to see every message), call handler (or not), and replace its
// error. srv is the service implementation.
type StreamServerInterceptor func(srv any, ss ServerStream, info *StreamServerInfo, handler StreamHandler) error

// Streamer is the rest of the client chain, ending in opening the stream.
type Streamer func(ctx context.Context, desc *StreamDesc, cc *ClientConn, method string, opts ...CallOption) (ClientStream, error)

// StreamClientInterceptor wraps the opening of a client stream; it may
// return a ClientStream of its own that wraps the one streamer returns.
type StreamClientInterceptor func(ctx context.Context, desc *StreamDesc, cc *ClientConn, method string, streamer Streamer, opts ...CallOption) (ClientStream, error)
