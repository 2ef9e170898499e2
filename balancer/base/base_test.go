package base_test

import (
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/balancer/base"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
)

// fakeCC is a ClientConn that records what the balancer does; its
// SubConns change state only when the test says.
type fakeCC struct {
	subs   []*fakeSC
	states []balancer.State
}

type fakeSC struct {
	addr     string
	connects int
	shut     bool
	listener func(balancer.SubConnState)
}

func (sc *fakeSC) UpdateAddresses([]resolver.Address) {}
func (sc *fakeSC) Connect()                           { sc.connects++ }
func (sc *fakeSC) Shutdown()                          { sc.shut = true }

func (cc *fakeCC) NewSubConn(addrs []resolver.Address, o balancer.NewSubConnOptions) (balancer.SubConn, error) {
	sc := &fakeSC{addr: addrs[0].Addr, listener: o.StateListener}
	cc.subs = append(cc.subs, sc)
	return sc, nil
}
func (cc *fakeCC) UpdateState(s balancer.State)          { cc.states = append(cc.states, s) }
func (cc *fakeCC) ResolveNow(resolver.ResolveNowOptions) {}
func (cc *fakeCC) Target() string                        { return "fake" }

func (cc *fakeCC) last() balancer.State { return cc.states[len(cc.states)-1] }

// names picks n times and returns the addresses picked.
func names(t *testing.T, p balancer.Picker, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		r, err := p.Pick(balancer.PickInfo{})
		if err != nil {
			t.Fatal(err)
		}
		got[r.SubConn.(*fakeSC).addr]++
	}
	return got
}

type firstPicker struct{}

func (firstPicker) Build(info base.PickerBuildInfo) balancer.Picker {
	var sc balancer.SubConn
	for s, i := range info.ReadySCs {
		if sc == nil || i.Address.Addr < sc.(*fakeSC).addr {
			sc = s
		}
	}
	return pickOne{sc}
}

type pickOne struct{ sc balancer.SubConn }

func (p pickOne) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc}, nil
}

func state(addrs ...string) balancer.ClientConnState {
	var s balancer.ClientConnState
	for _, a := range addrs {
		s.ResolverState.Addresses = append(s.ResolverState.Addresses, resolver.Address{Addr: a})
	}
	return s
}

// TestBaseBalancer: one SubConn per distinct address, connected at once
// and again when it goes Idle; the picker sees the Ready ones and is
// rebuilt only when that set changes; a removed address's SubConn is shut
// down; TransientFailure carries the backends' error.
func TestBaseBalancer(t *testing.T) {
	cc := &fakeCC{}
	b := base.NewBalancerBuilder("test_first", firstPicker{}, base.Config{}).Build(cc, balancer.BuildOptions{})
	if err := b.UpdateClientConnState(state("a", "b", "a")); err != nil {
		t.Fatal(err)
	}
	if len(cc.subs) != 2 || cc.subs[0].connects != 1 || cc.subs[1].connects != 1 {
		t.Fatalf("subconns %+v, want a and b, each connecting", cc.subs)
	}
	if s := cc.last().ConnectivityState; s != connectivity.Idle && s != connectivity.Connecting {
		t.Fatalf("before any is connected: %v", s)
	}
	a, bsc := cc.subs[0], cc.subs[1]
	a.listener(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
	bsc.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	if s := cc.last(); s.ConnectivityState != connectivity.Ready || names(t, s.Picker, 3)["b"] != 3 {
		t.Fatalf("b Ready: %v", s.ConnectivityState)
	}
	n := len(cc.states)
	a.listener(balancer.SubConnState{ConnectivityState: connectivity.Ready})
	if s := cc.last(); len(cc.states) != n+1 || names(t, s.Picker, 3)["a"] != 3 {
		t.Fatal("a Ready too: the picker was not rebuilt over both")
	}
	bsc.listener(balancer.SubConnState{ConnectivityState: connectivity.Idle})
	if bsc.connects != 2 {
		t.Fatalf("b went Idle: %d connects, want it connected again", bsc.connects)
	}
	if err := b.UpdateClientConnState(state("b")); err != nil {
		t.Fatal(err)
	}
	if !a.shut || bsc.shut {
		t.Fatal("the address the resolver dropped was not shut down (or the kept one was)")
	}
	failed := errors.New("connection refused")
	bsc.listener(balancer.SubConnState{ConnectivityState: connectivity.TransientFailure, ConnectionError: failed})
	s := cc.last()
	if _, err := s.Picker.Pick(balancer.PickInfo{}); s.ConnectivityState != connectivity.TransientFailure || !errors.Is(err, failed) {
		t.Fatalf("all failed: %v, pick error %v", s.ConnectivityState, err)
	}
	if err := b.UpdateClientConnState(state()); !errors.Is(err, balancer.ErrBadResolverState) {
		t.Fatalf("no addresses: %v", err)
	}
}
