// Package peers tests rdmarpc against real gRPC peers built from the Go
// module proxy (gRPC-go), in a module of its own so that the library's
// module never requires google.golang.org/grpc: server_*_test.go, gRPC-go's
// client calling an rdmarpc server over the gRPC protocol on its one port;
// client_*_test.go, an rdmarpc client (grpc:// targets) calling gRPC-go's
// server; orca_test.go, ORCA load reports both ways (rdmarpc's orca runs in
// internal/orcaclient and internal/orcaserver, processes of their own, as
// both orca packages register cncf/xds's service proto).
package peers
