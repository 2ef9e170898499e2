// Package interop runs gRPC's published interoperability test cases
// (grpc/grpc doc/interop-test-descriptions.md) against rdmarpc: a server
// that implements grpc.testing.TestService as those descriptions say
// (NewTestServer), and the client side of each case as a function that
// returns an error describing the first deviation from what the
// descriptions require (Cases, Run).
//
// The package's tests run every case over pipe:// and tcp://, and over
// rdma:// in the Soft-RoCE guest (testbed/tests.txt). The commands
// interop/cmd/interop-server and interop/cmd/interop-client take gRPC's
// flags (--port, --server_host, --server_port, --test_case) and a
// --transport, to run the cases by hand between two processes or hosts.
//
// It knows the rpc package and the generated grpc_testing stubs, never a
// transport: the caller dials and listens.
package interop
