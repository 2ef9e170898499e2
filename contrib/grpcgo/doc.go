// Package grpcgo runs gRPC-go's generated code (protoc-gen-go-grpc stubs,
// as published: grpc_health_v1, etcd's etcdserverpb, Google's API clients)
// over rdmarpc, unchanged: NewClient makes an rdmarpc ClientConn a
// grpc.ClientConnInterface, NewServer makes an rdmarpc Server a
// grpc.ServiceRegistrar.
//
// At the boundary it translates what the two libraries each keep in their
// own types: gRPC-go's call options (Header, Trailer, Peer, WaitForReady,
// MaxCallRecvMsgSize, MaxCallSendMsgSize, PerRPCCredentials, OnFinish,
// UseCompressor with a compressor registered with either library's
// encoding package; CallContentSubtype "proto", the only one rdmarpc has;
// any other option fails the call with InvalidArgument, naming it), metadata (gRPC-go's outgoing metadata is sent; a handler finds the
// incoming metadata, its peer, and grpc.SetHeader, SendHeader, SetTrailer
// and Method working, through either package), and status errors (what a
// client call returns is a status error to both status packages; what a
// handler returns, either package's, keeps its code).
//
// It is a module of its own, so that rdmarpc's library does not require
// gRPC-go; it knows nothing of transports.
package grpcgo
