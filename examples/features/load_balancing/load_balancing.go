// Package load_balancing is gRPC-go's examples/features/load_balancing on
// rdmarpc: two servers, each answering with its own address, and a client
// that calls them through pick_first (every call to the first) and then
// round_robin (calls in turn).
package load_balancing

import (
	"context"
	"flag"
	"fmt"
	"io"

	"golang.org/x/sync/errgroup"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

type echoServer struct {
	echopb.UnimplementedEchoServer
	addr string
}

func (s *echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: fmt.Sprintf("%s (from %s)", in.Message, s.addr)}, nil
}

// Server serves Echo on every address of --addr until ctx ends.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addrs := fs.String("addr", "tcp://127.0.0.1:50051,tcp://127.0.0.1:50052", "comma-separated addresses to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, a := range cli.Split(*addrs) {
		lis, err := cli.Listen(a, stdout)
		if err != nil {
			return err
		}
		s := rpc.NewServer()
		echopb.RegisterEchoServer(s, &echoServer{addr: lis.Addr().String()})
		g.Go(func() error { return cli.Serve(ctx, s, lis) })
	}
	return g.Wait()
}

// Client calls the servers of --addr ten times with pick_first, then ten
// times with round_robin, printing who answered.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addrs := fs.String("addr", "tcp://127.0.0.1:50051,tcp://127.0.0.1:50052", "comma-separated server addresses")
	n := fs.Int("n", 10, "calls per policy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := cli.StaticTarget(cli.Split(*addrs))
	if err != nil {
		return err
	}
	for _, policy := range []string{"pick_first", "round_robin"} {
		cc, err := rpc.NewClient(target,
			rpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig": [{"%s":{}}]}`, policy)))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "--- calling Echo.Say with %s ---\n", policy)
		c := echopb.NewEchoClient(cc)
		for range *n {
			r, err := c.Say(ctx, &echopb.SayRequest{Message: "this is examples/load_balancing"})
			if err != nil {
				cc.Close()
				return fmt.Errorf("%s: %w", policy, err)
			}
			fmt.Fprintln(stdout, r.Message)
		}
		cc.Close()
	}
	return nil
}
