package rpc_test

import (
	"testing"

	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/resolver/manual"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// endpoint groups servers' addresses as one endpoint.
func endpoint(addrs ...string) resolver.Endpoint {
	var e resolver.Endpoint
	for _, a := range addrs {
		e.Addresses = append(e.Addresses, resolver.Address{Addr: a})
	}
	return e
}

// TestRoundRobinOverEndpoints: round_robin spreads calls over endpoints,
// not addresses, as gRPC-go's does (its dualstack example): a server
// reachable at two addresses gets half the calls, not two thirds, and an
// endpoint whose first address is dead is reached at its next one.
func TestRoundRobinOverEndpoints(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	a, b := &backend{name: "A"}, &backend{name: "B"}
	a1, a2, b1 := startServer(t, tr, a), startServer(t, tr, a), startServer(t, tr, b)
	r := manual.NewBuilderWithScheme("endpoints")
	r.InitialState(resolver.State{Endpoints: []resolver.Endpoint{
		endpoint(a1.addr, a2.addr),
		endpoint("nobody-listens-here", b1.addr),
	}})
	_, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(roundRobinConfig))
	callUntil(t, c, 1, func(name string) bool { return name == "B" })
	callUntil(t, c, 1, func(name string) bool { return name == "A" })
	got := map[string]int{}
	ctx := testCtx(t)
	for range 100 {
		name, err := echo(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		got[name]++
	}
	if got["A"] != 50 || got["B"] != 50 {
		t.Fatalf("100 calls over two endpoints (A at two addresses): %v, want 50 each", got)
	}
}

// TestPickFirstOverEndpoints: pick_first takes every endpoint's addresses
// in order and uses the first that answers.
func TestPickFirstOverEndpoints(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	a, b := &backend{name: "A"}, &backend{name: "B"}
	a1, b1 := startServer(t, tr, a), startServer(t, tr, b)
	r := manual.NewBuilderWithScheme("pfendpoints")
	r.InitialState(resolver.State{Endpoints: []resolver.Endpoint{
		endpoint("nobody-listens-here", a1.addr),
		endpoint(b1.addr),
	}})
	_, c := newClient(t, tr, r)
	for range 5 {
		if name, err := echo(testCtx(t), c); err != nil || name != "A" {
			t.Fatalf("call: %q, %v; want A (the first address that answers)", name, err)
		}
	}
}
