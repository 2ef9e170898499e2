// Package drpcecho is the storj.io/drpc peer of the benchmarks: the Echo
// service of examples/echo served by drpcserver over drpcmux and called
// through drpcconn, with drpc's default options.
//
// There is no protoc-gen-go-drpc output in this module: the description
// below is what that generator writes for echo.proto (the same full method
// name, the same echopb messages, a protobuf encoding), written by hand as
// grpcecho's service descriptor is.
//
// A drpc connection carries one call at a time, so the client keeps a pool
// of connections: conc callers use conc connections, as drpc's own
// drpcpool would give them.
package drpcecho
