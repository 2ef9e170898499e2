// Package peer says who is at the other end of a call: its address and,
// when the connection was secured by transport credentials, what the
// handshake verified (credentials.TLSInfo with the peer's certificates). It
// has gRPC-go's peer package's shape, so a handler written for gRPC-go
// (peer.FromContext(ctx)) ports by changing the import.
//
// It knows nothing of connections or transports: the rpc package fills a
// Peer and puts it in the handler's context.
package peer
