// Package encoding is gRPC-go's encoding package in its shape: the registry
// of message compressors a call may name (UseCompressor) and a server
// answers with. Packages such as encoding/gzip register themselves in
// their init, so a program enables a compressor by importing it.
//
// This package must not know about connections or calls: rpc looks a
// compressor up by the name a call or a peer gives, and bounds what a
// decompressor may produce itself.
package encoding
