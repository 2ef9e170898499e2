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
	"strings"
	"syscall"
	"time"

	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "interop-client:", err)
		os.Exit(1)
	}
}

// errFailed: some case failed (its FAIL line says why).
var errFailed = errors.New("some cases failed")

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("interop-client", flag.ContinueOnError)
	host := fs.String("server_host", "127.0.0.1", "the server's `host`")
	port := fs.Int("server_port", 10000, "the server's `port`")
	tr := fs.String("transport", "tcp", "the transport: tcp, rdma, or grpc (gRPC's protocol over HTTP/2, to any gRPC server)")
	target := fs.String("target", "", "the server's `URL` (tcp://host:port, rdma://ip:port, grpc://host:port); overrides --server_host, --server_port and --transport")
	cases := fs.String("test_case", "large_unary", "the `cases` to run, comma-separated, or all: "+strings.Join(interop.Names, ", "))
	timeout := fs.Duration("timeout", time.Minute, "how long one case may take")
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
	names := interop.Names
	if *cases != "all" {
		names = strings.Split(*cases, ",")
		for _, n := range names {
			if interop.Cases[n] == nil {
				return fmt.Errorf("unknown --test_case %q; the cases are %s", n, strings.Join(interop.Names, ", "))
			}
		}
	}
	if *target == "" {
		if *tr != "tcp" && *tr != "rdma" && *tr != "grpc" {
			return fmt.Errorf("--transport %q: want tcp, rdma or grpc", *tr)
		}
		*target = *tr + "://" + net.JoinHostPort(*host, strconv.Itoa(*port))
	}

	dctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cc, err := rpc.Dial(dctx, *target)
	if err != nil {
		return err
	}
	defer cc.Close()
	failed := false
	for _, n := range names {
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		err := interop.Cases[n](cctx, cc)
		cancel()
		if err != nil {
			failed = true
			fmt.Fprintf(out, "FAIL %s: %v\n", n, err)
			continue
		}
		fmt.Fprintf(out, "PASS %s\n", n)
	}
	if failed {
		return errFailed
	}
	return nil
}
