// Package grpcwire holds the pieces of gRPC's mapping onto HTTP/2 that do not
// depend on a connection (gRPC's PROTOCOL-HTTP2.md): the length-prefixed
// message, the grpc-timeout and grpc-message encodings, binary metadata,
// reserved headers and metadata as header fields, content types, the status
// codes an HTTP status or an RST_STREAM stands for, and a header block cut
// into HEADERS and CONTINUATION frames — what the gRPC server
// (rpc/internal/h2server) and client (rpc/internal/h2client) share.
//
// Like package wire, its decoders never trust the bytes: nothing is sized
// from a number on the wire beyond a limit the caller gives, and every error
// says what was wrong. It knows nothing about connections or calls.
package grpcwire
