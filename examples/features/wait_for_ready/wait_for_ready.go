// Package wait_for_ready is gRPC-go's examples/features/wait_for_ready on
// rdmarpc: with no server up, a call fails at once with Unavailable, while
// a call with WaitForReady(true) waits for the server, started later, and
// succeeds.
package wait_for_ready

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: in.Message}, nil
}

// Server serves Echo on --addr; start it after the client.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50053", "where to listen")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout)
	if err != nil {
		return err
	}
	s := rpc.NewServer()
	echopb.RegisterEchoServer(s, echoServer{})
	return cli.Serve(ctx, s, lis)
}

// Client makes a call without WaitForReady, which fails while no server
// is up, then one with it, which waits (up to --timeout) for the server.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50053", "the server")
	timeout := fs.Duration("timeout", time.Minute, "how long the WaitForReady call waits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cc, err := rpc.NewClient(*addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := echopb.NewEchoClient(cc)
	_, err = c.Say(ctx, &echopb.SayRequest{Message: "Hi!"})
	fmt.Fprintf(stdout, "call without WaitForReady: %s\n", status.Code(err))
	if err == nil {
		return fmt.Errorf("a server is already up on %s: start it after the client", *addr)
	}
	fmt.Fprintln(stdout, "call with WaitForReady: waiting for the server")
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	r, err := c.Say(wctx, &echopb.SayRequest{Message: "Hi!"}, rpc.WaitForReady(true))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "call with WaitForReady: %s\n", r.Message)
	return nil
}
