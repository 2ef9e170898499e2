// Command orcaserver is an rdmarpc server with ORCA, for gRPC-go's ORCA
// client in the peer tests: the interop TestService, whose EmptyCall
// records the cost db_queries=10 (per-call reports, in the trailer) and
// the out-of-band service reporting CPU utilization 0.25. It prints
// "tcp=ADDR", then "ready", and stops when its standard input ends. A
// process of its own: its package orca registers cncf/xds's ORCA service
// proto, as gRPC-go's does.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/rdmarpc/rdmarpc/interop"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/orca"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

type costServer struct{ grpc_testing.TestServiceServer }

func (s costServer) EmptyCall(ctx context.Context, in *grpc_testing.Empty) (*grpc_testing.Empty, error) {
	orca.CallMetricsRecorderFromContext(ctx).SetRequestCost("db_queries", 10)
	return s.TestServiceServer.EmptyCall(ctx, in)
}

func main() {
	s := rpc.NewServer(orca.CallMetricsServerOption(nil))
	grpc_testing.RegisterTestServiceServer(s, costServer{interop.NewTestServer(interop.ServerOptions{})})
	smr := orca.NewServerMetricsRecorder()
	smr.SetCPUUtilization(0.25)
	if err := orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: smr}); err != nil {
		log.Fatal(err)
	}
	lis, err := rpc.Listen("tcp://127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("tcp=%s\n", lis.Addr())
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Stop()
	if err := <-served; err != nil {
		log.Fatal(err)
	}
}
