// Package dynamic is what `rdmarpc call`, `list`, `describe` and `bench`
// know about a service they have no generated code for: a Source of
// descriptors (.proto files compiled in process by internal/compile, or a
// server's reflection service), the lookup of services,
// methods and symbols in it, proto-like descriptions of them, and the JSON
// (protojson) form of requests, responses and status details.
//
// Messages are dynamicpb.Message values, which are proto.Message values: the
// RPC layer's default codec, rpc.ProtoCodec, encodes and decodes them as it
// does generated messages, and `call` uses it. RawCodec is for `bench`: it
// sends a request encoded once and takes responses without decoding them.
package dynamic
