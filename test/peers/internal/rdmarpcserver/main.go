// Command rdmarpcserver is the rdmarpc server the peer tests call with
// gRPC-go's client, in a process of its own: gRPC-go's generated packages
// and rdmarpc's register the same .proto files, which one binary cannot
// hold. It serves the interop TestService, health, reflection and
// peers.Details on a tcp:// and a unix:// listener, prints
// "tcp=ADDR" and "unix=PATH" lines, then "ready", and stops when its
// standard input ends. With -cert and -key it serves TLS (ALPN "h2" for
// gRPC clients).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime/pprof"

	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/channelz/service"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/credentials"
	_ "github.com/rdmarpc/rdmarpc/encoding/gzip" // gRPC clients may compress with gzip
	"github.com/rdmarpc/rdmarpc/health"
	healthpb "github.com/rdmarpc/rdmarpc/health/grpc_health_v1"
	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/reflection"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

// detailsDesc is a service of one method that fails with a status carrying
// a detail, and sends back the metadata it got as headers and trailers.
var detailsDesc = rpc.ServiceDesc{
	ServiceName: "peers.Details",
	HandlerType: (*any)(nil),
	Methods: []rpc.MethodDesc{{
		MethodName: "Fail",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			md, _ := metadata.FromIncomingContext(ctx)
			_ = rpc.SetHeader(ctx, metadata.MD{"x-got": md["x-sent"], "x-got-bin": md["x-sent-bin"]})
			_ = rpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
			st, err := status.New(codes.FailedPrecondition, "not now: 100% busy\n").WithDetails(wrapperspb.String("retry later"))
			if err != nil {
				return nil, err
			}
			return nil, st.Err()
		},
	}, {
		// Compressed answers 64 KiB of zeros compressed with the
		// compressor the request's x-compressor names, which the client
		// must have advertised (SetSendCompressor).
		MethodName: "Compressed",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ rpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md["x-compressor"]; len(v) == 1 {
				if err := rpc.SetSendCompressor(ctx, v[0]); err != nil {
					return nil, status.Error(codes.FailedPrecondition, err.Error())
				}
			}
			return wrapperspb.Bytes(make([]byte, 64<<10)), nil
		},
	}},
}

func main() {
	unixPath := flag.String("unix", "", "unix socket path to serve too")
	graceful := flag.Bool("graceful", false, "GracefulStop at the end of stdin, not Stop")
	certFile := flag.String("cert", "", "TLS certificate (PEM); with -key, every listener runs TLS")
	keyFile := flag.String("key", "", "TLS key (PEM)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for the benchmarks)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Fatal(err)
			}
		}()
	}
	var sopts []rpc.ServerOption
	var lopts []rpc.ListenOption
	if *certFile != "" {
		creds, err := credentials.NewServerTLSFromFile(*certFile, *keyFile)
		if err != nil {
			log.Fatal(err)
		}
		sopts = append(sopts, rpc.Creds(creds))
		lopts = append(lopts, rpc.ListenCreds(creds))
	}
	s := rpc.NewServer(sopts...)
	srv := interop.NewTestServer(interop.ServerOptions{})
	grpc_testing.RegisterTestServiceServer(s, srv)
	if u, ok := srv.(grpc_testing.UnimplementedServiceServer); ok {
		grpc_testing.RegisterUnimplementedServiceServer(s, u)
	}
	healthpb.RegisterHealthServer(s, health.NewServer())
	s.RegisterService(&detailsDesc, struct{}{})
	reflection.Register(s)
	service.RegisterChannelzServiceToServer(s)
	targets := []string{"tcp://127.0.0.1:0"}
	if *unixPath != "" {
		targets = append(targets, "unix://"+*unixPath)
	}
	served := make(chan error, len(targets))
	for _, target := range targets {
		lis, err := rpc.Listen(target, lopts...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s=%s\n", lis.Addr().Network(), lis.Addr())
		go func() { served <- s.Serve(lis) }()
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if *graceful {
		s.GracefulStop()
	} else {
		s.Stop()
	}
	for range targets {
		if err := <-served; err != nil {
			log.Fatal(err)
		}
	}
}
