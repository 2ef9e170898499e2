package main

import (
	"os"
	"strconv"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

// Large messages (issue 23's table): rdmarpc's message size limits raised
// to fit the largest of --sizes (gRPC's default 4 MiB refuses a 16 MiB
// echo), in this process and in the server's child process alike.
const maxMsgEnv = "RPCBENCH_MAX_MSG" // the message size limit, both ends

// setLargeEnv passes what o says about large messages to the server
// processes and applies it to this one.
func setLargeEnv(o options) error {
	largest := 0
	for _, n := range o.sizes {
		largest = max(largest, n)
	}
	// A frame carries a few bytes of header beyond its payload.
	if largest+(64<<10) > rpc.DefaultMaxRecvMsgSize {
		os.Setenv(maxMsgEnv, strconv.Itoa(largest+(64<<10)))
	}
	return configureTransports()
}

// configureTransports registers an rdma transport with the --rdma-* options
// the environment names (rdmaEnv) and the message size limit maxMsg, and a
// tcp transport that accepts maxMsg, where the defaults the packages
// registered would not do.
func configureTransports() error {
	rf, err := bench.DecodeRDMAFlags(os.Getenv(rdmaEnv))
	if err != nil {
		return err
	}
	o, err := rf.Options()
	if err != nil {
		return err
	}
	n := maxMsg()
	if n > transport.DefaultMaxMessageSize {
		o.MaxMessageSize = n
	}
	if !rf.IsDefault() || n > transport.DefaultMaxMessageSize {
		transport.Register("rdma", rdma.New(o))
	}
	if n > tcp.DefaultMaxMessageSize {
		transport.Register("tcp", tcp.New(tcp.Options{MaxMessageSize: n}))
	}
	return nil
}

// maxMsg is the message size limit the environment names, 0: the default.
func maxMsg() int {
	n, _ := strconv.Atoi(os.Getenv(maxMsgEnv))
	return n
}

// largeServerOpts is the server options for maxMsg.
func largeServerOpts() []rpc.ServerOption {
	n := maxMsg()
	if n == 0 {
		return nil
	}
	return []rpc.ServerOption{rpc.MaxRecvMsgSize(n), rpc.MaxSendMsgSize(n)}
}

// largeDialOpts is the dial options for maxMsg.
func largeDialOpts() []rpc.DialOption {
	n := maxMsg()
	if n == 0 {
		return nil
	}
	return []rpc.DialOption{rpc.WithMaxRecvMsgSize(n), rpc.WithMaxSendMsgSize(n)}
}
