package pickfirst

import (
	"errors"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/connectivity"
)

// Name is the policy's name in the service config.
const Name = "pick_first"

func init() { balancer.Register(builder{}) }

type builder struct{}

func (builder) Name() string { return Name }

func (builder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &pickFirst{cc: cc}
}

type pickFirst struct {
	cc balancer.ClientConn
	sc balancer.SubConn // one for the whole address list; nil until the first addresses
}

func (b *pickFirst) UpdateClientConnState(s balancer.ClientConnState) error {
	addrs := s.ResolverState.Complete().Addresses // every endpoint's, in order
	if len(addrs) == 0 {
		b.ResolverError(errors.New("the resolver reported no addresses"))
		return balancer.ErrBadResolverState
	}
	if b.sc == nil {
		sc, err := b.cc.NewSubConn(addrs, balancer.NewSubConnOptions{StateListener: b.updateState})
		if err != nil {
			return err // the ClientConn is closing
		}
		b.sc = sc
	} else {
		b.sc.UpdateAddresses(addrs)
	}
	b.sc.Connect()
	return nil
}

func (b *pickFirst) ResolverError(err error) {
	if b.sc == nil {
		// Keep the backend in use; without one, calls fail fast.
		b.cc.UpdateState(balancer.State{ConnectivityState: connectivity.TransientFailure, Picker: errPicker{err}})
	}
}

func (b *pickFirst) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

// updateState mirrors the backend's state as the ClientConn's.
func (b *pickFirst) updateState(st balancer.SubConnState) {
	var p balancer.Picker
	switch st.ConnectivityState {
	case connectivity.Ready:
		p = scPicker{b.sc}
	case connectivity.Idle:
		p = idlePicker{b.sc}
	case connectivity.TransientFailure:
		p = errPicker{st.ConnectionError}
	case connectivity.Connecting:
		p = errPicker{balancer.ErrNoSubConnAvailable}
	default:
		return
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: st.ConnectivityState, Picker: p})
}

func (b *pickFirst) ExitIdle() {
	if b.sc != nil {
		b.sc.Connect()
	}
}

func (b *pickFirst) Close() {}

type scPicker struct{ sc balancer.SubConn }

func (p scPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc}, nil
}

// idlePicker connects the backend at the first call, which waits for it.
type idlePicker struct{ sc balancer.SubConn }

func (p idlePicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	p.sc.Connect()
	return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
}

type errPicker struct{ err error }

func (p errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, p.err
}
