// Package grpc is where a program ported from gRPC-go finds gRPC-go's root
// package: the one import rule of a port is
//
//	google.golang.org/grpc   → github.com/rdmarpc/rdmarpc/grpc
//	google.golang.org/grpc/X → github.com/rdmarpc/rdmarpc/X
//
// (rdmarpc port applies it, and lists what the program uses that rdmarpc
// lacks). It re-exports package rpc's API under gRPC-go's names (type
// aliases and forwarded functions, so a grpc.ClientConn is an
// *rpc.ClientConn), adds the few entry points whose gRPC-go signature
// differs from rpc's (Dial, Peer), and imports the default transports
// (tcp://, unix:// and rdma://), so a ported program runs with no added
// import.
//
// It is the top of the import graph: nothing in rdmarpc imports it, and rpc,
// which never imports a transport, stays the API for code that picks its
// transports itself.
package grpc
