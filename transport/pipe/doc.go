// Package pipe is an in-memory rdmarpc transport, for tests: both ends of a
// connection live in one process and exchange messages through bounded
// queues, so it has the backpressure of a real transport (a receiver that
// does not read makes Send block once MaxBuffered bytes are queued) without
// sockets or devices. Importing it registers the "pipe" scheme: a server
// listens on "pipe://name" and rpc.Dial("pipe://name") reaches it, as
// gRPC-go's bufconn does.
//
// It implements the transport package's contract and must not know about
// RPC or about the other transports.
package pipe
