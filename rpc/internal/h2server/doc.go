// Package h2server serves gRPC over HTTP/2 (gRPC's PROTOCOL-HTTP2.md) on
// a connection whose client sent HTTP/2's client preface, by translation:
// a Conn is a transport.Conn that the RPC server serves like any other,
// whose frames are the rdmarpc frames (rpc/internal/wire) the HTTP/2
// client's streams amount to. A request whose method is unary becomes a
// REQUEST once its one message and END_STREAM have arrived; any other
// becomes an OPEN at its HEADERS, a MESSAGE per gRPC message and a
// CLOSE_SEND at END_STREAM; RST_STREAM becomes CANCEL or RESET. The
// server's RESPONSE, HEADERS, MESSAGE, TRAILERS and RESET frames become
// HTTP/2 HEADERS, DATA and trailers. So services, interceptors, stats
// handlers, limits and keepalive policy apply unchanged. A request's
// grpc-encoding goes to the server as rdmarpc's own compression metadata
// (rpc/compress.go): the server decompresses, bounded by its message
// limit, and answers with the same compressor, which the response headers
// name and its messages' compressed flag marks. A request's
// grpc-accept-encoding reaches the server too (and the handler's metadata,
// as in gRPC-go), so a handler may answer compressed with a compressor the
// client takes (rpc.SetSendCompressor); every response's headers name the
// compressors the server takes in its own grpc-accept-encoding.
//
// HTTP/2's flow control is the Conn's own: it grants a stream's window as
// the server takes its messages (within the server's own rdmarpc windows,
// which it keeps to), and the connection's as bytes arrive; what it sends
// waits for the client's windows in a writer goroutine, and it grants the
// server's rdmarpc windows back as that is written.
package h2server
