// Package grpc_testing holds the grpc.testing messages and services of
// gRPC's interoperability tests (TestService, UnimplementedService),
// generated from proto/grpc/testing by rdmarpc gen. The .proto files were
// written from gRPC's published schema with the same package, names and
// field numbers, so what crosses the wire is what gRPC's own test clients
// and servers exchange. The name is gRPC-go's, so code written against
// google.golang.org/grpc/interop/grpc_testing ports by its import path.
package grpc_testing

//go:generate go run github.com/rdmarpc/rdmarpc/cmd/rdmarpc gen -I proto --out . --opt module=github.com/rdmarpc/rdmarpc/interop/grpc_testing proto/grpc/testing/empty.proto proto/grpc/testing/messages.proto proto/grpc/testing/test.proto
