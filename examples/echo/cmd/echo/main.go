package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/reflection"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func main() {
	root := &cobra.Command{
		Use:           "echo",
		Short:         "The demo Echo service: a server, and a client that calls it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(echoServeCmd(), echoCallCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Say(ctx context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: in.Message, Payload: in.Payload}, nil
}

func echoServeCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve Echo until SIGINT or SIGTERM, then drain calls and exit",
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := zap.NewProduction()
			if err != nil {
				return err
			}
			defer log.Sync()
			lis, err := transport.Listen(listen)
			if err != nil {
				return err
			}
			s := rpc.NewServer(rpc.Logger(log))
			echopb.RegisterEchoServer(s, echoServer{})
			hs := health.NewServer()
			hs.SetServingStatus(echopb.Echo_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
			healthpb.RegisterHealthServer(s, hs)
			reflection.Register(s)
			fmt.Fprintf(cmd.OutOrStdout(), "echo server listening on %s\n", lis.Addr())
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(stop)
			served := make(chan error, 1)
			go func() { served <- s.Serve(lis) }()
			select {
			case err := <-served:
				return err
			case sig := <-stop:
				log.Info("shutting down", zap.Stringer("signal", sig))
			}
			hs.Shutdown()
			drained := make(chan struct{})
			go func() { s.GracefulStop(); close(drained) }()
			select {
			case <-drained:
			case <-time.After(10 * time.Second):
				log.Warn("calls still running after 10s; stopping them")
				s.Stop()
				<-drained
			}
			return <-served
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "tcp://127.0.0.1:7070", "where to listen (tcp://host:port or rdma://ip:port)")
	return cmd
}

func echoCallCmd() *cobra.Command {
	var (
		target  string
		message string
		count   int
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "call",
		Short: "Call Echo.Say and print the answer and the round-trip time",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cc, err := rpc.Dial(ctx, target)
			if err != nil {
				return err
			}
			defer cc.Close()
			c := echopb.NewEchoClient(cc)
			for i := range count {
				start := time.Now()
				resp, err := c.Say(ctx, &echopb.SayRequest{Message: message})
				if err != nil {
					st := status.Convert(err)
					return fmt.Errorf("call %d: %s: %s", i+1, st.Code(), st.Message())
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s answered %q in %v\n", target, resp.Message, time.Since(start).Round(time.Microsecond))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&target, "target", "tcp://127.0.0.1:7070", "the server to call")
	cmd.Flags().StringVar(&message, "message", "hello, rdmarpc", "what to send")
	cmd.Flags().IntVar(&count, "count", 3, "how many calls to make")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "deadline for the whole run")
	return cmd
}
