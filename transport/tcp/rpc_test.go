package tcp

import (
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc/rpctest"
)

// TestRPC runs the RPC conformance suite over TCP.
func TestRPC(t *testing.T) {
	rpctest.Run(t, rpctest.Config{Transport: New(Options{}), Addr: "127.0.0.1:0"})
}
