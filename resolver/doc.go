// Package resolver turns a target such as "dns:///kv.prod:7070" into the
// addresses a client connects to, in the shape of gRPC-go's resolver package:
// a Builder, registered by scheme, builds a Resolver for a Target; the
// Resolver reports State (the addresses) to a ClientConn through UpdateState,
// or an error through ReportError, and resolves again when asked with
// ResolveNow.
//
// A target names the resolver by its scheme, and may name the transport the
// addresses are dialed with by a prefix to that scheme (see ParseTarget):
//
//	dns:///kv.prod:7070          DNS; the client's default transport
//	rdma+dns:///kv.prod:7070     DNS; every address dialed over RDMA
//	auto+dns:///kv.prod:7070     DNS; RDMA, or TCP where no RDMA device serves
//	tcp://10.0.0.1:7070          one address over TCP, as before resolvers
//
// The builders live in subpackages that register themselves when imported:
// resolver/dns, resolver/passthrough, resolver/static (ipv4:, ipv6:) and
// resolver/unix. This package knows none of them, nor any RPC or balancing.
package resolver
