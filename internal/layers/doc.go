// Package layers holds no code: its test states the library's layers and fails when a
// package imports one in a layer above it, or when a package has no layer yet.
//
// The layers, lowest first (docs/architecture.md draws them):
//
//	0 leaves      codes, attributes, backoff, connectivity, keepalive, grpclog, internal helpers,
//	              the verbs binding and the credit engine, codegen
//	1 vocabulary  status, metadata, credentials, peer, encoding, serviceconfig
//	2 contract    transport, stats, resolver, channelz (the registry rpc feeds), the accept
//	              core, the conformance suite
//	3 plugins     transport/tcp, transport/rdma, transport/pipe, resolver/*, balancer/*
//	4 core        rpc and its internal packages
//	5 services    health, reflection, channelz/service, generated stubs
//	6 programs    commands, interop, test helpers over rpc, the grpc root package, tools
//
// A package may import its own layer and those below it. Test files are not checked:
// a test stands above what it tests.
package layers
