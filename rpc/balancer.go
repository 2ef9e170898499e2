package rpc

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/status"
)

// ccBalancer is the ClientConn as one balancer sees it (gRPC-go's
// balancer_wrapper): the ClientConn makes a new one each time it leaves
// Idle, and closes it when it goes Idle again or closes; a closed one's
// calls do nothing. The balancer itself is built and called only on the
// ClientConn's serializer.
type ccBalancer struct {
	cc     *ClientConn
	b      balancer.Balancer // on the serializer only
	closed atomic.Bool       // set under cc.mu
}

func (w *ccBalancer) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("rpc: NewSubConn with no address")
	}
	cc := w.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if w.closed.Load() || cc.closed {
		return nil, errors.New("rpc: the balancer is closed")
	}
	s := cc.newSubConn(addrs)
	s.bal, s.listener = w, opts.StateListener
	if s.listener == nil {
		s.listener = func(st balancer.SubConnState) { w.b.UpdateSubConnState(s, st) }
	}
	cc.subs = append(cc.subs, s)
	return s, nil
}

func (w *ccBalancer) UpdateState(st balancer.State) {
	cc := w.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if w.closed.Load() || cc.closed {
		return
	}
	cc.picker = st.Picker
	cc.setStateLocked(st.ConnectivityState)
}

// ResolveNow asks the resolver on a goroutine of its own: a resolver may
// hold its lock while it waits for the balancer to take its state.
func (w *ccBalancer) ResolveNow(resolver.ResolveNowOptions) {
	cc := w.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if w.closed.Load() || cc.closed {
		return
	}
	cc.wg.Add(1)
	go func() {
		defer cc.wg.Done()
		cc.resolveNow()
	}()
}

func (w *ccBalancer) Target() string { return w.cc.target }

// do runs f with the balancer on the serializer, unless it is closed by
// then; the channel is closed once f ran (or was skipped). Called under
// cc.mu, so that the balancer is told things in the order they happened.
func (w *ccBalancer) do(f func(balancer.Balancer)) <-chan struct{} {
	ran := make(chan struct{})
	w.cc.ser.schedule(func() {
		defer close(ran)
		if !w.closed.Load() {
			f(w.b)
		}
	})
	return ran
}

// closeLocked closes the balancer: from now on nothing reaches it but its
// Close.
func (w *ccBalancer) closeLocked() {
	w.closed.Store(true)
	w.cc.ser.schedule(func() {
		if w.b != nil {
			w.b.Close()
		}
	})
}

// serializer runs the balancer's calls one at a time, in the order they
// were scheduled, on a goroutine of the ClientConn's that exits when
// nothing is left to run: the balancer is never called under cc.mu, nor
// on a call's goroutine, and may call the ClientConn back.
type serializer struct {
	wg      *sync.WaitGroup // the ClientConn's
	mu      sync.Mutex      // a leaf, taken under cc.mu
	q       []func()
	running bool
}

// schedule queues f. The ClientConn is not closed yet (its Close waits
// for the goroutine).
func (s *serializer) schedule(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = append(s.q, f)
	if !s.running {
		s.running = true
		s.wg.Add(1)
		go s.run()
	}
}

func (s *serializer) run() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		f := s.q[0]
		s.q[0] = nil
		s.q = s.q[1:]
		s.mu.Unlock()
		f()
	}
}

// pick asks the current picker for a link for a call to method. It
// returns nil without an error when the call is to wait for the next
// picker (none yet, ErrNoSubConnAvailable, the SubConn picked is no longer
// Ready, or a failure and waitForReady).
func (cc *ClientConn) pick(ctx context.Context, p balancer.Picker, method string, waitForReady bool) (*clientLink, func(balancer.DoneInfo), error) {
	if p == nil {
		return nil, nil, nil
	}
	res, err := p.Pick(balancer.PickInfo{FullMethodName: method, Ctx: ctx})
	switch {
	case err == nil:
	case errors.Is(err, balancer.ErrNoSubConnAvailable):
		return nil, nil, nil
	case isStatusError(err):
		return nil, nil, err // the balancer's verdict, WaitForReady or not
	case waitForReady:
		return nil, nil, nil
	default:
		return nil, nil, pickError(err)
	}
	s, ok := res.SubConn.(*subConn)
	if !ok || s.cc != cc {
		return nil, nil, status.Errorf(codes.Internal, "rpc: the balancer picked %T, not a SubConn of this ClientConn", res.SubConn)
	}
	cc.mu.Lock()
	l := s.cur
	if s.pickState() != connectivity.Ready {
		l = nil
	}
	cc.mu.Unlock()
	if l == nil {
		return nil, nil, nil
	}
	return l, res.Done, nil
}

func isStatusError(err error) bool {
	_, ok := status.FromError(err)
	return ok
}

// pickError is the error of a call a picker failed: Unavailable, carrying
// the picker's error as its cause.
func pickError(err error) error {
	return status.ErrorWithCause(codes.Unavailable, err.Error(), err)
}
