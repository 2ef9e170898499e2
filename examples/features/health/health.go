// Package health is gRPC-go's examples/features/health on rdmarpc: servers
// that report their health through the health service (one can toggle
// between SERVING and NOT_SERVING), and a client whose service config asks
// round_robin to health-check each backend, so calls go only to the ones
// SERVING.
package health

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	healthsrv "github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// serviceConfig balances round_robin over backends whose health service
// says SERVING for "" (the whole server).
const serviceConfig = `{
	"loadBalancingConfig": [{"round_robin": {}}],
	"healthCheckConfig": {"serviceName": ""}
}`

type echoServer struct {
	echopb.UnimplementedEchoServer
	addr string
}

func (s *echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: fmt.Sprintf("%s (from %s)", in.Message, s.addr)}, nil
}

// Server serves Echo and the health service, starting with --status and,
// when --toggle is not 0, switching between SERVING and NOT_SERVING every
// --toggle.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "where to listen")
	serving := fs.Bool("serving", true, "start SERVING (else NOT_SERVING)")
	toggle := fs.Duration("toggle", 5*time.Second, "switch the status this often; 0 never")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout)
	if err != nil {
		return err
	}
	s := rpc.NewServer()
	echopb.RegisterEchoServer(s, &echoServer{addr: lis.Addr().String()})
	hs := healthsrv.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	set := func(serving bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		fmt.Fprintf(stdout, "health status: %s\n", st)
	}
	set(*serving)
	toggled := make(chan struct{})
	go func() { // switches the status until ctx ends
		defer close(toggled)
		if *toggle <= 0 {
			return
		}
		tick := time.NewTicker(*toggle)
		defer tick.Stop()
		for st := *serving; ; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				st = !st
				set(st)
			}
		}
	}()
	defer func() { <-toggled }()
	// Health watches end when the server stops, so that it can drain.
	defer context.AfterFunc(ctx, hs.Shutdown)()
	return cli.Serve(ctx, s, lis)
}

// Client calls the backends of --addr --n times, printing who answered.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addrs := fs.String("addr", "tcp://127.0.0.1:50051,tcp://127.0.0.1:50052", "comma-separated server addresses")
	n := fs.Int("n", 10, "calls to make")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := cli.StaticTarget(cli.Split(*addrs))
	if err != nil {
		return err
	}
	cc, err := rpc.NewClient(target, rpc.WithDefaultServiceConfig(serviceConfig))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := echopb.NewEchoClient(cc)
	for range *n {
		r, err := c.Say(ctx, &echopb.SayRequest{Message: "hello"})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "UnaryEcho:", r.Message)
	}
	return nil
}
