// Package tcp is the rdmarpc transport over TCP (optionally TLS): whole
// messages framed with a length prefix on a net.Conn, after a small versioned
// hello that announces each side's maximum message size. It serves tests,
// machines without RDMA, and the fallback when no RDMA device serves an
// address. Importing it registers the "tcp" scheme, and "unix" for the same
// framing over unix stream sockets.
//
// Transport credentials (credentials.TransportCredentials: TLS, mutual TLS)
// run before the hello (DialWithCredentials, ListenWithCredentials), and the
// connection's AuthInfo is what they verified. NewListener and
// NewClientConn run the transport on any net.Listener or net.Conn, which is
// how the RPC server Serves a net.Listener.
//
// A Recv reads the socket itself when it can, so a message costs no hand-off
// from a reader goroutine, as in a raw TCP ping-pong; the reader goroutine
// reads into a bounded queue when nobody else does (concurrent Recvs, a ctx
// it cannot watch, nobody in Recv), which is when OnArrival's callback runs
// (read.go; transport.Arrivals).
//
// It implements the transport package's contract and must not know about RPC
// or about the RDMA transport.
package tcp
