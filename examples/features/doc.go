// Package features holds rdmarpc's ports of gRPC-go's feature examples
// (examples/features in grpc-go): wait_for_ready, retry, health, compression,
// load_balancing, name_resolving, keepalive, authentication, authz and
// encryption. Each has a server and a client command taking --addr (a
// target URL: tcp:// by default, rdma:// accepted) and reads as the gRPC-go
// program with its imports changed. The logic of both commands lives in
// the example's package (Server and Client, each a run(ctx, args, stdout)
// function) so that one test per example runs both in-process.
package features
