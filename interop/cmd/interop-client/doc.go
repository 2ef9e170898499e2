// Command interop-client runs gRPC's interop test cases (package interop)
// against a server of grpc.testing.TestService, such as interop-server,
// with gRPC's flags and a transport:
//
//	interop-client --server_port 10000 --test_case large_unary
//	interop-client --transport rdma --server_host 10.0.0.1 --server_port 10000 --test_case all
//	interop-client --target tcp://127.0.0.1:10000 --test_case ping_pong,empty_stream
//
// It prints a PASS or FAIL line per case and exits 1 when any failed.
package main
