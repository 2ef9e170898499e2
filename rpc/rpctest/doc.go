// Package rpctest is the RPC conformance suite: the behaviour users rely on
// (calls, status codes, deadlines, cancellation, metadata, interceptors,
// size limits, keepalive, shutdown, reconnection, bad input), run over
// whichever transport a test hands it. Each transport's tests run it, so the
// RDMA transport passes the very tests the TCP transport passes.
//
// It uses only the transport interfaces and the rpc package.
package rpctest
