// Package peers tests rdmarpc against real peers, not its own: gRPC-go's
// client calling an rdmarpc server over the gRPC protocol (server_*_test.go).
// It is a module of its own, so the library's module never requires
// google.golang.org/grpc.
package peers
