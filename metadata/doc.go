// Package metadata holds the key-value pairs that travel with a call:
// request headers from client to server, response headers and trailers back.
// Keys are lower-case; a key may have several values; keys ending in "-bin"
// carry arbitrary bytes. The API mirrors gRPC-go's metadata package.
//
// It depends only on context; it must not know about connections or the wire.
package metadata
