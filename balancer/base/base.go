package base

import (
	"errors"
	"strings"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
)

// PickerBuilder builds a Picker over the Ready SubConns.
type PickerBuilder interface {
	// Build is called with at least one Ready SubConn.
	Build(info PickerBuildInfo) balancer.Picker
}

// PickerBuildInfo holds the Ready SubConns, each with its address.
type PickerBuildInfo struct {
	ReadySCs map[balancer.SubConn]SubConnInfo
}

// SubConnInfo is what a picker may know of a SubConn.
type SubConnInfo struct {
	// Address is the SubConn's address, attributes included.
	Address resolver.Address
}

// Config is the balancer's configuration. HealthCheck is kept for
// gRPC-go's callers: here a SubConn's health is checked whenever the
// service config's healthCheckConfig asks, whatever the policy.
type Config struct {
	HealthCheck bool
}

// NewBalancerBuilder returns a Builder named name whose balancers build
// their Pickers with pb.
func NewBalancerBuilder(name string, pb PickerBuilder, config Config) balancer.Builder {
	return &builder{name: name, pb: pb}
}

type builder struct {
	name string
	pb   PickerBuilder
}

func (b *builder) Name() string { return b.name }

func (b *builder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &baseBalancer{cc: cc, pb: b.pb, state: connectivity.Connecting, stale: true}
}

// sub is one backend (an endpoint): its SubConn, first address and last
// state.
type sub struct {
	sc    balancer.SubConn
	addr  resolver.Address
	key   string
	state connectivity.State
	err   error
}

type baseBalancer struct {
	cc     balancer.ClientConn
	pb     PickerBuilder
	subs   []*sub // in the resolver's order
	resErr error
	state  connectivity.State
	stale  bool // the Ready set changed since the picker was built
}

// key is what makes two endpoints one backend: a duplicate gets one
// SubConn.
func key(e resolver.Endpoint) string {
	var k strings.Builder
	for _, a := range e.Addresses {
		k.WriteString(a.Transport + "|" + a.Addr + "|" + a.ServerName + "\x00")
	}
	return k.String()
}

// UpdateClientConnState keeps a backend (a SubConn) per endpoint: calls are
// spread over endpoints, whatever number of addresses each has, and each
// SubConn connects to its endpoint's first address that answers.
func (b *baseBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	eps := s.ResolverState.Complete().Endpoints
	if len(eps) == 0 {
		b.ResolverError(errors.New("the resolver reported no addresses"))
		return balancer.ErrBadResolverState
	}
	b.resErr = nil
	old := make(map[string]*sub, len(b.subs))
	for _, s := range b.subs {
		old[s.key] = s
	}
	subs := make([]*sub, 0, len(eps))
	for _, e := range eps {
		if len(e.Addresses) == 0 {
			continue
		}
		k := key(e)
		if s, ok := old[k]; ok {
			subs = append(subs, s)
			delete(old, k)
			continue
		}
		if seen(subs, k) {
			continue
		}
		n := &sub{addr: e.Addresses[0], key: k, state: connectivity.Idle}
		sc, err := b.cc.NewSubConn(e.Addresses, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) { b.updateSubConnState(n, st) },
		})
		if err != nil {
			continue // the ClientConn is closing
		}
		n.sc = sc
		subs = append(subs, n)
		sc.Connect()
	}
	for _, s := range old {
		s.sc.Shutdown()
	}
	b.subs = subs
	b.stale = true
	b.publish()
	return nil
}

func seen(subs []*sub, k string) bool {
	for _, s := range subs {
		if s.key == k {
			return true
		}
	}
	return false
}

func (b *baseBalancer) ResolverError(err error) {
	b.resErr = err
	if len(b.subs) == 0 {
		// Keep the backends in use; without any, calls fail fast.
		b.stale = true
		b.publish()
	}
}

func (b *baseBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (b *baseBalancer) updateSubConnState(s *sub, st balancer.SubConnState) {
	if st.ConnectivityState == connectivity.Shutdown {
		return
	}
	if (s.state == connectivity.Ready) != (st.ConnectivityState == connectivity.Ready) {
		b.stale = true
	}
	s.state, s.err = st.ConnectivityState, st.ConnectionError
	if s.state == connectivity.Idle {
		s.sc.Connect() // a backend whose connection broke connects again at once
	}
	b.publish()
}

func (b *baseBalancer) ExitIdle() {
	for _, s := range b.subs {
		s.sc.Connect()
	}
}

func (b *baseBalancer) Close() {}

// publish gives the ClientConn the aggregate state (Ready if a backend is,
// else Connecting if one is, else Idle if one is, else TransientFailure)
// and, when the Ready set or the state changed, a new Picker.
func (b *baseBalancer) publish() {
	state := connectivity.TransientFailure
	if len(b.subs) == 0 && b.resErr == nil {
		state = connectivity.Connecting // the resolver has not answered yet
	}
	ready := make(map[balancer.SubConn]SubConnInfo)
	for _, s := range b.subs {
		if rank(s.state) > rank(state) {
			state = s.state
		}
		if s.state == connectivity.Ready {
			ready[s.sc] = SubConnInfo{Address: s.addr}
		}
	}
	if state == b.state && !b.stale && state != connectivity.TransientFailure {
		return // the same picker serves
	}
	b.state, b.stale = state, false
	var p balancer.Picker
	switch state {
	case connectivity.Ready:
		p = b.pb.Build(PickerBuildInfo{ReadySCs: ready})
	case connectivity.TransientFailure:
		p = NewErrPicker(b.failure())
	default:
		p = NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

// failure is why calls fail in TransientFailure: the resolver's error when
// there is no backend, else the first backend's that has one.
func (b *baseBalancer) failure() error {
	if len(b.subs) == 0 && b.resErr != nil {
		return b.resErr
	}
	for _, s := range b.subs {
		if s.err != nil {
			return s.err
		}
	}
	return errors.New("no backend is ready")
}

// rank orders the states of backends for the ClientConn's: the best wins.
func rank(s connectivity.State) int {
	switch s {
	case connectivity.Ready:
		return 3
	case connectivity.Connecting:
		return 2
	case connectivity.Idle:
		return 1
	}
	return 0
}

// NewErrPicker returns a Picker that fails every pick with err.
func NewErrPicker(err error) balancer.Picker { return errPicker{err} }

type errPicker struct{ err error }

func (p errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, p.err
}
