// Package keepalive is gRPC-go's examples/features/keepalive on rdmarpc:
// a server with keepalive parameters (idle and age limits, its own pings)
// and an enforcement policy (the least interval between a client's
// pings), and a client with keepalive parameters that makes a call, then
// keeps its connection open and pinged until stopped. A client pinging
// more often than the policy allows is sent GOAWAY "too_many_pings", which
// it logs before pinging half as often.
package keepalive

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: in.Message}, nil
}

// Server serves Echo with gRPC-go's example's keepalive settings; --min-time
// is the enforcement policy's least ping interval.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50052", "where to listen")
	minTime := fs.Duration("min-time", 5*time.Second, "the least interval between a client's pings")
	if err := fs.Parse(args); err != nil {
		return err
	}
	kaep := keepalive.EnforcementPolicy{
		MinTime:             *minTime, // a client pinging more often is sent GOAWAY
		PermitWithoutStream: true,     // pings are allowed with no call in progress
	}
	kasp := keepalive.ServerParameters{
		MaxConnectionIdle:     15 * time.Second, // a connection idle this long is sent GOAWAY
		MaxConnectionAge:      30 * time.Second, // a connection this old is sent GOAWAY
		MaxConnectionAgeGrace: 5 * time.Second,  // after which its calls are cut
		Time:                  5 * time.Second,  // the server pings a client silent this long
		Timeout:               1 * time.Second,  // and closes the connection if no sign of life follows
	}
	lis, err := cli.Listen(*addr, stdout)
	if err != nil {
		return err
	}
	s := rpc.NewServer(rpc.KeepaliveEnforcementPolicy(kaep), rpc.KeepaliveParams(kasp))
	echopb.RegisterEchoServer(s, echoServer{})
	return cli.Serve(ctx, s, lis)
}

// Client makes one call with keepalive parameters (--time between pings
// of a quiet connection), then keeps the connection until ctx ends,
// logging (warnings, to stdout) what the server says about its pings.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50052", "the server")
	pingTime := fs.Duration("time", 10*time.Second, "ping the server after this long without activity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	kacp := keepalive.ClientParameters{
		Time:                *pingTime,   // ping after this long without activity
		Timeout:             time.Second, // wait this long for the ping's answer
		PermitWithoutStream: true,        // ping with no call in progress too
	}
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
		zapcore.AddSync(stdout), zap.WarnLevel))
	cc, err := rpc.NewClient(*addr, rpc.WithKeepaliveParams(kacp), rpc.WithLogger(log))
	if err != nil {
		return err
	}
	defer cc.Close()
	r, err := echopb.NewEchoClient(cc).Say(ctx, &echopb.SayRequest{Message: "keepalive demo"})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "UnaryEcho:", r.Message)
	fmt.Fprintln(stdout, "keeping the connection open; stop with ^C")
	<-ctx.Done()
	return nil
}
