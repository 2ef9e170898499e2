// Package rawecho is the floor of the TCP benchmarks: a raw ping-pong of
// length-prefixed frames (a 4-byte big-endian length, then the payload)
// over plain sockets, one goroutine per connection on the server, one call
// in flight per connection on the client (callers take connections from a
// pool, so conc callers use conc connections). No framing beyond the
// length, no protobuf, no multiplexing: what an RPC framework costs is
// what it adds to this.
//
// Only the payload travels; a request's Message is not sent (the
// benchmarks send none, and Say refuses one rather than drop it).
package rawecho
