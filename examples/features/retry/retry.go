// Package retry is gRPC-go's examples/features/retry on rdmarpc: a server
// that fails the first attempts of every call with Unavailable, and a
// client whose service config's retryPolicy makes the call succeed anyway.
package retry

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// serviceConfig retries Echo's calls on Unavailable, up to four attempts.
const serviceConfig = `{
	"methodConfig": [{
		"name": [{"service": "rdmarpc.echo.v1.Echo"}],
		"retryPolicy": {
			"maxAttempts": 4,
			"initialBackoff": "0.01s",
			"maxBackoff": "0.01s",
			"backoffMultiplier": 1.0,
			"retryableStatusCodes": ["UNAVAILABLE"]
		}
	}]
}`

type failingServer struct {
	echopb.UnimplementedEchoServer
	fail    int // attempts failed before one succeeds
	stdoutW io.Writer

	mu    sync.Mutex
	count int
}

// maybeFail fails all but every (fail+1)th attempt.
func (s *failingServer) maybeFail(stdout io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	if s.count%(s.fail+1) != 0 {
		fmt.Fprintf(stdout, "request %d: failing it\n", s.count)
		return status.Errorf(codes.Unavailable, "maybeFail: failing it")
	}
	fmt.Fprintf(stdout, "request %d: succeeding\n", s.count)
	return nil
}

// Server serves Echo, failing --fail attempts before each success.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50052", "where to listen")
	fail := fs.Int("fail", 2, "attempts failed with Unavailable before one succeeds")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lis, err := cli.Listen(*addr, stdout)
	if err != nil {
		return err
	}
	s := rpc.NewServer()
	echopb.RegisterEchoServer(s, &failingServer{fail: *fail, stdoutW: stdout})
	return cli.Serve(ctx, s, lis)
}

func (s *failingServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	if err := s.maybeFail(s.stdoutW); err != nil {
		return nil, err
	}
	return &echopb.SayResponse{Message: in.Message}, nil
}

// Client calls the server once with the retry policy (without it with
// --no-retry) and prints the answer.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50052", "the server")
	noRetry := fs.Bool("no-retry", false, "leave the retry policy out")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var opts []rpc.DialOption
	if !*noRetry {
		opts = append(opts, rpc.WithDefaultServiceConfig(serviceConfig))
	}
	cc, err := rpc.NewClient(*addr, opts...)
	if err != nil {
		return err
	}
	defer cc.Close()
	r, err := echopb.NewEchoClient(cc).Say(ctx, &echopb.SayRequest{Message: "Try and Success"})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "UnaryEcho reply: %s\n", r.Message)
	return nil
}
