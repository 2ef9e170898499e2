// Package gzip registers the "gzip" compressor (RFC 1952, Go's
// compress/gzip) with package encoding when it is imported, as gRPC-go's
// encoding/gzip does:
//
//	import _ "github.com/rdmarpc/rdmarpc/encoding/gzip"
//
// and a call asks for it with rpc.UseCompressor(gzip.Name).
package gzip
