// Package reflection serves gRPC server reflection,
// grpc.reflection.v1.ServerReflection, in gRPC-go's shape, so that tools
// (rdmarpc list, describe, call and bench, over tcp:// and rdma://) can list
// a server's services and describe them without its .proto files:
//
//	s := rpc.NewServer()
//	kvpb.RegisterKVServer(s, kv)
//	reflection.Register(s)
//
// The services listed are those registered on the server (GetServiceInfo);
// the files come from protobuf's global registry, where generated code
// registers itself, or from ServerOptions.DescriptorResolver. Each file is
// sent with those of its transitive imports not sent before on the same
// stream, as gRPC-go does; a request the service cannot answer gets an
// ErrorResponse (NotFound with the name asked for) and the stream goes on.
//
// A name asked about (a symbol, a message type, an extension's containing
// type) longer than 1 KiB or of more than 64 dot-separated parts gets an
// ErrorResponse with InvalidArgument before any lookup: protoregistry finds
// a name by trying each of its prefixes, so a lookup of a long "a.a.a…"
// would cost CPU quadratic in its length (package internal/protoname). Any
// other lookup costs at most 64 times the name's length.
//
// One request costs what its answer costs, at most every file the resolver
// holds: the service keeps, per stream, only the set of files already sent
// (at most one entry per file of the resolver), and it reads the next
// request only after answering the previous one, so a client that sends
// requests without reading the answers is held back by the stream's flow
// control, not buffered.
//
// Only v1 is served. gRPC-go's Register also serves the older, identical
// grpc.reflection.v1alpha, for clients from before v1; every rdmarpc client
// is newer than that.
//
// grpc_reflection_v1 registers grpc/reflection/v1/reflection.proto as
// gRPC-go's package does: a binary that links both panics at start with
// protobuf's registration conflict. Use one of them in a binary; see package
// health's documentation for the way to keep gRPC-go's messages instead.
package reflection
