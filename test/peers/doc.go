// Package peers tests rdmarpc against real gRPC peers built from the Go
// module proxy (gRPC-go), in a module of its own so that the library's
// module never requires google.golang.org/grpc. client_*_test.go: an
// rdmarpc client (grpc:// targets) against gRPC-go's server.
package peers
