// Command orcaclient is an rdmarpc client with a balancer in the shape of
// gRPC-go's ORCA example: it makes -calls EmptyCalls to -addr, printing
// each call's load report ("per-call: map[...]") as its picker's Done sees
// it, then waits for one out-of-band report from its SubConn's listener
// ("oob: cpu_utilization=..."), and exits. A process of its own: its
// package orca registers cncf/xds's ORCA service proto, as gRPC-go's does,
// and the peer tests' binary holds gRPC-go's.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
	"github.com/rdmarpc/rdmarpc/interop/grpc_testing"
	"github.com/rdmarpc/rdmarpc/orca"
	"github.com/rdmarpc/rdmarpc/rpc"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

var oob = make(chan *v3orcapb.OrcaLoadReport, 1)

func main() {
	addr := flag.String("addr", "", "the target, grpc://host:port for a gRPC server")
	calls := flag.Int("calls", 3, "calls to make")
	flag.Parse()
	cc, err := rpc.NewClient(*addr, rpc.WithTransportCredentials(insecure.NewCredentials()),
		rpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"orca_peer":{}}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := grpc_testing.NewTestServiceClient(cc)
	for range *calls {
		if _, err := c.EmptyCall(ctx, &grpc_testing.Empty{}); err != nil {
			log.Fatal(err)
		}
	}
	select {
	case r := <-oob:
		fmt.Printf("oob: cpu_utilization=%v\n", r.GetCpuUtilization())
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "no out-of-band report")
		os.Exit(1)
	}
}

func init() { balancer.Register(builder{}) }

type builder struct{}

func (builder) Name() string { return "orca_peer" }
func (builder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &lb{cc: cc}
}

type lb struct {
	cc balancer.ClientConn
	sc balancer.SubConn
}

func (b *lb) UpdateClientConnState(s balancer.ClientConnState) error {
	if b.sc != nil {
		return nil
	}
	sc, err := b.cc.NewSubConn(s.ResolverState.Addresses, balancer.NewSubConnOptions{
		StateListener: func(st balancer.SubConnState) {
			if st.ConnectivityState == connectivity.Ready {
				b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: picker{b.sc}})
			}
		},
	})
	if err != nil {
		return err
	}
	b.sc = sc
	sc.Connect()
	orca.RegisterOOBListener(sc, listener{}, orca.OOBListenerOptions{ReportInterval: time.Second})
	return nil
}

func (b *lb) ResolverError(error)                                        {}
func (b *lb) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (b *lb) ExitIdle()                                                  {}
func (b *lb) Close()                                                     {}

type picker struct{ sc balancer.SubConn }

func (p picker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc, Done: func(di balancer.DoneInfo) {
		r, _ := di.ServerLoad.(*v3orcapb.OrcaLoadReport)
		fmt.Println("per-call:", r.GetRequestCost())
	}}, nil
}

type listener struct{}

func (listener) OnLoadReport(r *v3orcapb.OrcaLoadReport) {
	select {
	case oob <- r:
	default:
	}
}
