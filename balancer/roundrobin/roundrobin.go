package roundrobin

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/balancer/base"
)

// Name is the policy's name in the service config.
const Name = "round_robin"

func init() {
	balancer.Register(base.NewBalancerBuilder(Name, pickerBuilder{}, base.Config{HealthCheck: true}))
}

type pickerBuilder struct{}

func (pickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	scs := make([]balancer.SubConn, 0, len(info.ReadySCs))
	for sc := range info.ReadySCs {
		scs = append(scs, sc)
	}
	p := &picker{scs: scs}
	// A random start, so that clients made together do not all begin on
	// the same backend.
	p.next.Store(rand.Uint32N(uint32(len(scs))))
	return p
}

type picker struct {
	scs  []balancer.SubConn
	next atomic.Uint32
}

func (p *picker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	n := p.next.Add(1) - 1
	return balancer.PickResult{SubConn: p.scs[n%uint32(len(p.scs))]}, nil
}
