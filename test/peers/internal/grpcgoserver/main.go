// Command grpcgoserver is gRPC-go's own interop TestService server, the
// reference the peer benchmarks compare rdmarpc's server with: it prints
// "tcp=ADDR" and "ready", and stops when its standard input ends.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, interop.NewTestServer())
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	fmt.Printf("tcp=%s\nready\n", lis.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
	if err := <-served; err != nil {
		log.Fatal(err)
	}
}
