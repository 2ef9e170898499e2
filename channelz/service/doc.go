// Package service serves gRPC's channelz protocol (grpc.channelz.v1.Channelz)
// from package channelz's registry: the process's channels (ClientConns),
// their subchannels (backends), its servers, and their sockets, with what
// each counted. gRPC-go's google.golang.org/grpc/channelz/service, at the
// same relative path.
//
// A socket's options say which transport carries it (option "transport":
// "tcp", "rdma", "unix", "h2" for a gRPC client on the server's port) and
// hold that transport's own counters, when it keeps some (RDMA's credits,
// receiver-not-ready retries), as "<transport>.<counter>". Channel traces
// and flow-control windows are not reported.
package service
