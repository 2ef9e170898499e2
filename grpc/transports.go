package grpc

// The transports a gRPC-go program gets without asking: what it ported
// dials and serves tcp:// (and unix://) as gRPC-go's does, and rdma://
// without another import.
import (
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)
