// Command interop-server serves grpc.testing.TestService as gRPC's interop
// test descriptions specify (package interop), for interop-client or any
// rdmarpc client to run the cases against:
//
//	interop-server --port 10000                         # tcp://127.0.0.1:10000
//	interop-server --transport rdma --host 10.0.0.1 --port 10000
//
// It prints the address it serves on, and stops gracefully on SIGINT or
// SIGTERM.
package main
