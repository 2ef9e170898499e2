// Package h2client is the client side of the gRPC protocol over HTTP/2
// (gRPC's PROTOCOL-HTTP2.md) as a transport.Conn: the rpc layer's link
// frames (rpc/internal/wire) go in through Send and come out of Recv, and
// in between they travel as HTTP/2 HEADERS, DATA, RST_STREAM, PING and
// GOAWAY frames to any gRPC server. It registers the transport scheme
// "grpc" (targets grpc://host:port, grpc+dns:///name:port), so an rdmarpc
// client calls a gRPC-go or grpc-java server with the same API; the rpc
// layer does not know which protocol carries its frames.
//
// Flow control is HTTP/2's: a sender waits in Send for the server's
// windows; the rpc layer's own stream and connection credit is given back
// to it as each of its frames is written. Messages for a stream are held
// here until the rpc layer's stream window lets them through, and HTTP/2
// window is granted back only for what it took, so what one connection
// holds is bounded by the windows this side announces plus one message
// per stream (docs/wire.md, "gRPC over HTTP/2: the client"). The rpc
// layer's own connection window (its SETTINGS, its WINDOW_UPDATEs of call
// id 0) is kept to as well; stream windows grow from measured
// bandwidth-delay, as gRPC-go's do. A call's compressor (UseCompressor)
// is named in grpc-encoding and marked on each message; a compressed
// response goes to the rpc layer to decompress.
package h2client
