package rpc

import (
	"context"
	"sync"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/status"
)

// producers are a SubConn's balancer.Producers (ORCA's out-of-band
// reports): each built once, counted by its users, stopped by its last
// user's close or, at the latest, when the SubConn shuts down. Guarded by
// their own mutex, never held with cc.mu: a Producer's close waits for its
// goroutines, which open streams, which take cc.mu.
type producers struct {
	mu     sync.Mutex
	built  map[balancer.ProducerBuilder]*producerRef
	closed bool // the SubConn shut down: Producers built now stop at once
}

type producerRef struct {
	p     balancer.Producer
	close func()
	refs  int
}

// GetOrBuildProducer returns s's Producer of pb, building it on first
// use (balancer.ProducerSubConn).
func (s *subConn) GetOrBuildProducer(pb balancer.ProducerBuilder) (balancer.Producer, func()) {
	ps := &s.producers
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.built == nil {
		ps.built = map[balancer.ProducerBuilder]*producerRef{}
		context.AfterFunc(s.ctx, s.closeProducers)
	}
	ref := ps.built[pb]
	if ref == nil {
		p, closeP := pb.Build(subConnStreams{s})
		if ps.closed {
			closeP()
			return p, func() {}
		}
		ref = &producerRef{p: p, close: closeP}
		ps.built[pb] = ref
	}
	ref.refs++
	var once sync.Once
	return ref.p, func() {
		once.Do(func() {
			ps.mu.Lock()
			ref.refs--
			last := ref.refs == 0 && ps.built[pb] == ref
			if last {
				delete(ps.built, pb)
			}
			ps.mu.Unlock()
			if last {
				ref.close()
			}
		})
	}
}

// closeProducers stops every Producer of s: it shut down.
func (s *subConn) closeProducers() {
	ps := &s.producers
	ps.mu.Lock()
	ps.closed = true
	refs := ps.built
	ps.built = map[balancer.ProducerBuilder]*producerRef{}
	ps.mu.Unlock()
	for _, r := range refs {
		r.close()
	}
}

// subConnStreams is the ClientConnInterface a Producer gets: its calls
// and streams go to the SubConn's current connection, and fail
// Unavailable while there is none Ready. Call options are applied as on
// the ClientConn's own calls; the client's interceptors and stats
// handlers are not run (the stream is the balancer's, not the user's).
type subConnStreams struct{ s *subConn }

func (c subConnStreams) NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error) {
	s := c.s
	cc := s.cc
	cc.mu.Lock()
	l := s.cur
	ready := l != nil && s.state == connectivity.Ready && !s.shutdown
	cc.mu.Unlock()
	if !ready {
		return nil, status.Error(codes.Unavailable, "rpc: the SubConn is not Ready")
	}
	ci := callInfo{maxRecvSize: cc.opts.maxRecvSize, maxSendSize: cc.opts.maxSendSize}
	for _, o := range opts {
		o.apply(&ci)
	}
	md, err := l.callMD(ctx, method, nil, &ci)
	if err != nil {
		return nil, err
	}
	cs, err := l.open(ctx, desc, method, md, &ci, nil)
	if err == errNotSent {
		return nil, status.Error(codes.Unavailable, "rpc: the SubConn's connection is closing")
	}
	if err != nil {
		return nil, err
	}
	return cs, nil
}

func (c subConnStreams) Invoke(ctx context.Context, method string, req, reply any, opts ...CallOption) error {
	cs, err := c.NewStream(ctx, &StreamDesc{}, method, opts...)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req); err != nil {
		return cs.RecvMsg(reply)
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	return cs.RecvMsg(reply)
}
