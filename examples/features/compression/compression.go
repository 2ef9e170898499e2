// Package compression is gRPC-go's examples/features/compression on
// rdmarpc: the client compresses its call with gzip (importing
// encoding/gzip registers it; UseCompressor names it), and the server,
// which imports it too, answers compressed with the same compressor.
package compression

import (
	"context"
	"flag"
	"fmt"
	"io"

	_ "github.com/rdmarpc/rdmarpc/encoding/gzip" // registers "gzip"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Say(_ context.Context, in *echopb.SayRequest) (*echopb.SayResponse, error) {
	return &echopb.SayResponse{Message: in.Message}, nil
}

// Server serves Echo on --addr.
func Server(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "where to listen")
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

// Client makes one call compressed with gzip.
func Client(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "tcp://127.0.0.1:50051", "the server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cc, err := rpc.NewClient(*addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := echopb.NewEchoClient(cc)
	const msg = "compress"
	r, err := c.Say(ctx, &echopb.SayRequest{Message: msg}, rpc.UseCompressor("gzip"))
	fmt.Fprintf(stdout, "Say call returned %q, %v\n", r.GetMessage(), err)
	if err != nil || r.GetMessage() != msg {
		return fmt.Errorf("message %q, error %v; want %q, no error", r.GetMessage(), err, msg)
	}
	return nil
}
