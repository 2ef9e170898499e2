// Package stats reports what the RPC layer does, call by call and
// connection by connection, to handlers set with rpc.StatsHandler (server)
// and rpc.WithStatsHandler (client): the hook that metrics and tracing
// packages (contrib/prometheus, contrib/otel) are built on.
//
// It mirrors google.golang.org/grpc/stats: a Handler tags each connection
// and each RPC with a context, then receives the events of its life in
// order. For one RPC they are Begin, OutHeader, OutPayload… on the side that
// sends, InHeader, InPayload… on the side that receives, InTrailer (client)
// or OutTrailer (server), and End, once, last. A unary call is a stream with
// one message each way. A connection gets ConnBegin and ConnEnd.
//
// A server reports the RPCs it runs a handler for: those it answers before
// any handler (an unknown method, a malformed or oversized request, a
// refusal for lack of room) are not reported. A client reports every call
// from Begin to End, a call sent again after a refusal with one more
// OutHeader and OutPayload.
//
// What a Handler's TagConn adds to a connection's context is seen in the
// contexts of its RPCs: on the server in every event's (and the method
// handler's), as gRPC-go's server streams derive from their connection; on
// the client from OutHeader on, once the call has picked its connection.
//
// Handlers run on the call's goroutine or on the connection's reader: they
// must be quick and must not block. A client stream's InHeader and a server
// stream's Begin and InHeader come from the reader; a client's TagConn and
// ConnBegin run while the ClientConn holds its lock (so that calls find the
// connection tagged), so they must not call the ClientConn. Events of one
// RPC may come concurrently: a stream may send on one goroutine and
// receive on another, as gRPC-go allows, and a client stream's header and
// trailer arrive on the reader. Without handlers the RPC layer costs
// nothing more than a nil check per event.
//
// The transport's own counters (credits waited for, receives posted,
// completions, work-completion errors) are reachable from every connection
// through ConnTagInfo.Counters, when its transport keeps some.
package stats
