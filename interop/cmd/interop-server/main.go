package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "interop-server:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, printing the target it listens on to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("interop-server", flag.ContinueOnError)
	port := fs.Int("port", 10000, "the `port` to listen on (0: any)")
	host := fs.String("host", "127.0.0.1", "the `address` to listen on; for rdma, an IP an RDMA device serves")
	tr := fs.String("transport", "tcp", "the transport: tcp or rdma")
	useTLS := fs.Bool("use_tls", false, "TLS (gRPC's flag): not supported, must be false")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *useTLS {
		return errors.New("--use_tls is not supported")
	}
	if *tr != "tcp" && *tr != "rdma" {
		return fmt.Errorf("--transport %q: want tcp or rdma", *tr)
	}
	lis, err := rpc.Listen(*tr + "://" + net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	s := rpc.NewServer()
	grpc_testing.RegisterTestServiceServer(s, interop.NewTestServer(interop.ServerOptions{}))
	fmt.Fprintf(out, "serving on %s://%s\n", *tr, lis.Addr())
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		s.GracefulStop()
		return <-served
	}
}
