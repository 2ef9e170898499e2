package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// TestGRPCOnBootstrapPort: an rdma:// server's one port serves a gRPC
// client over HTTP/2 (here rdmarpc's own grpc:// client, which test/peers
// checks against gRPC-go's server), rdmarpc over TCP and RDMA, all three
// at once (issue 21 item 1).
func TestGRPCOnBootstrapPort(t *testing.T) {
	ip := guestIP(t)
	lis, err := rpc.Listen("rdma://" + net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer()
	testpb.RegisterTestServer(srv, slowEcho{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() { srv.Stop(); <-served }()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, scheme := range []string{"grpc", "tcp", "rdma"} {
		cc, err := rpc.Dial(ctx, scheme+"://"+lis.Addr().String())
		if err != nil {
			t.Fatalf("%s://: dial: %v", scheme, err)
		}
		resp, err := testpb.NewTestClient(cc).Echo(ctx, &testpb.EchoRequest{Payload: []byte("over " + scheme)})
		cc.Close()
		if err != nil || string(resp.GetPayload()) != "over "+scheme {
			t.Fatalf("%s://: Echo: %q, %v", scheme, resp.GetPayload(), err)
		}
	}
}
