package rpc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// TestJoinServerOptions: the options JoinServerOptions joins apply in
// order, as if given one by one: the first interceptor is outermost.
func TestJoinServerOptions(t *testing.T) {
	var order []string
	mark := func(name string) rpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, _ *rpc.UnaryServerInfo, h rpc.UnaryHandler) (any, error) {
			order = append(order, name)
			return h(ctx, req)
		}
	}
	srv := rpc.NewServer(rpc.JoinServerOptions(rpc.ChainUnaryInterceptor(mark("a")), rpc.JoinServerOptions(rpc.ChainUnaryInterceptor(mark("b")))), rpc.ChainUnaryInterceptor(mark("c")))
	testpb.RegisterTestServer(srv, newGate())
	cc := serveAndDial(t, pipe.New(pipe.Options{}), "join:0", srv)
	if _, err := testpb.NewTestClient(cc).Echo(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "a,b,c" {
		t.Fatalf("interceptors ran %s, want a,b,c", got)
	}
}
