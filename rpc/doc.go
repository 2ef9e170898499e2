// Package rpc is rdmarpc's RPC layer: a Server that serves registered
// services, a ClientConn that makes unary calls and opens streams,
// multiplexed by id over one transport connection, with deadlines,
// cancellation, status codes, metadata, interceptors, keepalive and graceful
// shutdown. The wire format is in docs/wire.md.
//
// Its shape is gRPC-go's: generated code fills a ServiceDesc and calls
// Invoke or NewStream, so code written for gRPC reads the same here.
//
// rpc sits above any transport. It picks one by the target's scheme through
// the transport package's registry and must never import a concrete
// transport (transport/tcp, transport/rdma): programs import those. A
// net.Listener given to Serve, and WithContextDialer's connections, are
// framed by whichever transport is registered for "tcp".
//
// Security: Creds and WithTransportCredentials hand credentials to the
// transports (which run them below the RPC frames); the verified peer is in
// a handler's context (package peer), per-RPC credentials add metadata to
// each call. Connection management (package keepalive): keepalive, ping
// enforcement (GOAWAY "too_many_pings"), idle and age limits.
//
// The client side (clientconn.go, subconn.go): NewClient resolves its
// target with the resolver package (every resolver of rdmarpc is imported
// here) on first use, and a balancer named by the service config
// (package balancer; balancer.go is the seam) keeps one subConn per
// backend, each with its links, connectivity state and backoff; health.go
// watches backends' health, retry.go retries unary calls as the service
// config's retryPolicy says. client.go and clientstream.go are one link's
// calls and streams.
//
// What one connection may hold is bounded: a server runs MaxConcurrentCalls
// calls at once and queues more within MaxQueuedRequestBytes (refusing the
// rest before they run, which the client holds and sends again once a slot
// frees); its encoded responses not yet taken by the transport stay within
// MaxUnsentResponseBytes, and a client that takes none for ResponseTimeout
// is disconnected; metadata is capped by MaxHeaderListSize on both ends.
// The server never stops reading a connection to push back, so keepalive
// and cancellation work whatever its handlers do.
//
// Streams are flow-controlled one by one and per connection (package
// rpc/internal/conn, the connection layer):
// each end gives each stream a receive window (InitialWindowSize) and the
// connection one for all its streams (InitialConnWindowSize), and copies
// the messages of a stream nobody reads out of transport memory, within
// both windows, so the reader always reads and one stalled stream stalls
// nothing else. At most MaxConcurrentStreams
// are open on a connection.
//
// Interceptor order: interceptors given as a list run in list order, the
// first being the outermost: for [A, B], A runs first, calls B, which calls
// the method (or the network), and A sees the final result last. Client and
// server chains follow the same rule.
package rpc
