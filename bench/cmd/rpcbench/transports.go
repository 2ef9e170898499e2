package main

// The transports rpcbench can serve and drive: each registers its URL scheme
// from init. A new transport is one more blank import here.
import (
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)
