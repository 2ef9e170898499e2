package rpc

// The gRPC protocol over HTTP/2 is a transport scheme of its own,
// "grpc" (grpc://host:port, grpc+dns:///name:port): its connections carry
// the rpc layer's frames like any transport's, so calling a gRPC server
// needs nothing else here.
import _ "github.com/rdmarpc/rdmarpc/rpc/internal/h2client"
