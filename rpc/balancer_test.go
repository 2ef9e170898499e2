package rpc_test

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/balancer/base"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/resolver/manual"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/serviceconfig"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// firstReady is a balancer as a user writes one, outside the rpc package:
// every call goes to the first Ready backend in the order its
// configuration lists them; backends it does not list get no call. It
// counts the calls its pickers' Done saw succeed.
type firstReady struct {
	cc     balancer.ClientConn
	order  []string
	scs    map[string]balancer.SubConn
	states map[string]connectivity.State
	done   *atomic.Int64
}

const firstReadyName = "test_first_ready"

type firstReadyConfig struct {
	serviceconfig.LoadBalancingConfig
	Order []string `json:"order"`
}

var firstReadyDone atomic.Int64

type firstReadyBuilder struct{}

func init() { balancer.Register(firstReadyBuilder{}) }

func (firstReadyBuilder) Name() string { return firstReadyName }

func (firstReadyBuilder) ParseConfig(raw json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c firstReadyConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	if len(c.Order) == 0 {
		return nil, errors.New("order lists no backend")
	}
	return &c, nil
}

func (firstReadyBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &firstReady{cc: cc, scs: map[string]balancer.SubConn{}, states: map[string]connectivity.State{}, done: &firstReadyDone}
}

func (b *firstReady) UpdateClientConnState(s balancer.ClientConnState) error {
	b.order = s.BalancerConfig.(*firstReadyConfig).Order
	for _, a := range s.ResolverState.Addresses {
		if _, ok := b.scs[a.Addr]; ok {
			continue
		}
		addr := a.Addr
		sc, err := b.cc.NewSubConn([]resolver.Address{a}, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) {
				b.states[addr] = st.ConnectivityState
				if st.ConnectivityState == connectivity.Idle {
					b.scs[addr].Connect()
				}
				b.publish()
			},
		})
		if err != nil {
			return err
		}
		b.scs[addr] = sc
		sc.Connect()
	}
	b.publish()
	return nil
}

func (b *firstReady) publish() {
	for _, name := range b.order {
		if b.states[name] == connectivity.Ready {
			b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: onePicker{b.scs[name], b.done}})
			return
		}
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Connecting, Picker: base.NewErrPicker(balancer.ErrNoSubConnAvailable)})
}

func (b *firstReady) ResolverError(error)                                        {}
func (b *firstReady) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (b *firstReady) ExitIdle()                                                  {}
func (b *firstReady) Close()                                                     {}

type onePicker struct {
	sc   balancer.SubConn
	done *atomic.Int64
}

func (p onePicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc, Done: func(di balancer.DoneInfo) {
		if di.Err == nil {
			p.done.Add(1)
		}
	}}, nil
}

// TestUserBalancer: a balancer registered with balancer.Register and named
// in the service config's loadBalancingConfig, with its own configuration,
// decides where every call goes, follows its backends' states, and hears
// of each call's end.
func TestUserBalancer(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	bs, ss := backends(t, tr, 3)
	r := manual.NewBuilderWithScheme("user")
	r.InitialState(stateOf(ss...))
	config := `{"loadBalancingConfig":[{"no_such_policy":{}},{"` + firstReadyName + `":{"order":["` + ss[2].addr + `","` + ss[0].addr + `"]}}]}`
	_, c := newClient(t, tr, r, rpc.WithDefaultServiceConfig(config))
	before := firstReadyDone.Load()
	callUntil(t, c, 10, func(n string) bool { return n == ss[2].addr })
	// The first listed dies: calls move to the second, none fails.
	ss[2].srv.Stop()
	callUntil(t, c, 10, func(n string) bool { return n == ss[0].addr })
	if n := bs[1].calls.Load(); n != 0 {
		t.Fatalf("the backend the config does not list got %d calls", n)
	}
	calls := bs[0].calls.Load() + bs[2].calls.Load()
	if d := firstReadyDone.Load() - before; d != calls {
		t.Fatalf("the picker's Done saw %d calls succeed, the backends served %d", d, calls)
	}

	_, err := rpc.NewClient("passthrough:///x:1", rpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"`+firstReadyName+`":{}}]}`))
	if err == nil {
		t.Fatal("a config the balancer's ParseConfig refuses was accepted")
	}
}
