// Package grpcecho is the gRPC-go baseline of the benchmarks: the Echo
// service of examples/echo served and called through gRPC-go with its
// default options, the way a user who picked gRPC instead would run it.
//
// There are no grpc-generated stubs in this module; the service descriptor
// is written by hand, with the same full method name and the same echopb
// messages (gRPC's proto codec takes them as they are).
//
// This is the one package that imports gRPC outside tests. It is internal
// so that nothing outside bench/ can import it, and only the benchmarks and
// bench/cmd/rpcbench do: gRPC must never reach a program that uses rdmarpc.
package grpcecho
