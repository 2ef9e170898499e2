package rpc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// subConn is the connection to one backend (gRPC's addrConn), the
// balancer.SubConn its balancer made: a list of addresses tried in order
// (pick_first's whole list, or round_robin's one), at most one link that
// takes new calls, and the backoff between failed attempts. Its fields are
// guarded by cc.mu.
type subConn struct {
	cc  *ClientConn
	bal *ccBalancer // the balancer that made it
	// listener is told the state changes, on the serializer; reported is
	// the last state it was given.
	listener func(balancer.SubConnState)
	reported balancer.SubConnState
	ctx      context.Context // ends at shutdown: the dial and the backoff wait stop
	cancel   context.CancelFunc

	addrs   []resolver.Address
	state   connectivity.State // of the transport
	health  connectivity.State // with health checking: Connecting until the first answer, then Ready or TransientFailure
	cur     *clientLink
	curAddr resolver.Address
	// stopHealth ends cur's health watch: a link that stops taking new
	// calls must not be kept open by its Watch stream.
	stopHealth context.CancelFunc
	err        error // why it is in TransientFailure: the last failed attempt's, or the health check's
	failures   int   // failed attempts in a row
	running    bool  // the connect goroutine runs
	shutdown   bool
	// fellBack holds the addresses to dial with the fallback transport
	// (no RDMA device serves them, or their RDMA link failed); under cc.mu
	// (dial's attempts run side by side). A failed attempt clears it: the
	// next one tries the target's own transport first.
	fellBack map[string]bool
	// curVia is how cur was dialed; probing: a goroutine probes the
	// target's own transport while cur runs over the fallback
	// (failover.go).
	curVia  via
	probing bool
	// producers are the balancer's Producers on s (producer.go); not
	// guarded by cc.mu.
	producers producers

	chz *channelz.SubChannel // what channelz shows of it, until shutdown
}

func (cc *ClientConn) newSubConn(addrs []resolver.Address) *subConn {
	s := &subConn{cc: cc, addrs: addrs, state: connectivity.Idle}
	s.ctx, s.cancel = context.WithCancel(cc.ctx)
	s.chz = cc.chz.NewSubChannel(addrsName(addrs), s.chzState)
	return s
}

// pickState is the state the balancer sees: the transport's, or with
// health checking, a Ready transport's health.
func (s *subConn) pickState() connectivity.State {
	if s.state == connectivity.Ready && s.cc.sc.health {
		return s.health
	}
	return s.state
}

// reportLocked tells the balancer the state, if it changed since it was
// last told, unless the balancer is closed.
func (s *subConn) reportLocked() {
	st := balancer.SubConnState{ConnectivityState: s.pickState(), ConnectionError: s.err}
	if st.ConnectivityState != connectivity.TransientFailure {
		st.ConnectionError = nil
	}
	if st == s.reported || s.bal.closed.Load() || s.reported.ConnectivityState == connectivity.Shutdown {
		return
	}
	s.reported = st
	s.bal.do(func(balancer.Balancer) { s.listener(st) })
}

// Connect starts connecting an Idle backend.
func (s *subConn) Connect() {
	s.cc.mu.Lock()
	defer s.cc.mu.Unlock()
	s.connectLocked()
}

func (s *subConn) connectLocked() {
	if s.state != connectivity.Idle || s.running || s.shutdown {
		return
	}
	s.running = true
	s.state = connectivity.Connecting
	s.cc.wg.Add(1)
	go s.run()
	s.reportLocked()
}

// UpdateAddresses gives the backend a new address list (pick_first's).
func (s *subConn) UpdateAddresses(addrs []resolver.Address) {
	cc := s.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if s.shutdown {
		return
	}
	if l := s.setAddrsLocked(addrs); l != nil {
		s.reportLocked()
		cc.drainLocked(l, "backend's address removed by the resolver")
	}
}

// Shutdown removes the backend; its link finishes its calls, then closes.
func (s *subConn) Shutdown() {
	cc := s.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if s.shutdown {
		return
	}
	for i, o := range cc.subs {
		if o == s {
			cc.subs = append(cc.subs[:i], cc.subs[i+1:]...)
			break
		}
	}
	if l := s.shutdownLocked(); l != nil {
		cc.drainLocked(l, "backend removed by the resolver")
	}
}

// drainLocked drains l (it finishes its calls, then closes) on a
// goroutine of cc's: draining takes the link's lock, which is never taken
// inside cc.mu's.
func (cc *ClientConn) drainLocked(l *clientLink, why string) {
	cc.wg.Add(1)
	go func() {
		defer cc.wg.Done()
		l.drain(status.New(codes.Unavailable, why))
	}()
}

// setAddrsLocked gives pick_first's backend a new address list; the link in
// use is returned, to drain, when its address left the list.
func (s *subConn) setAddrsLocked(addrs []resolver.Address) *clientLink {
	s.addrs = addrs
	if s.cur == nil {
		return nil
	}
	for _, a := range addrs {
		if a.Equal(s.curAddr) {
			return nil
		}
	}
	l := s.dropLinkLocked()
	s.state = connectivity.Idle
	return l
}

// dropLinkLocked takes cur out of use and returns it.
func (s *subConn) dropLinkLocked() *clientLink {
	l := s.cur
	s.cur = nil
	if s.stopHealth != nil {
		s.stopHealth()
		s.stopHealth = nil
	}
	return l
}

// shutdownLocked removes the backend; its link, if any, is returned, to
// drain.
func (s *subConn) shutdownLocked() *clientLink {
	s.shutdown = true
	s.state = connectivity.Shutdown
	s.cancel()
	s.chz.Close()
	s.reportLocked()
	return s.dropLinkLocked()
}

// run connects: it tries the addresses until one answers, and after an
// attempt where none did, waits the backoff delay (in TransientFailure)
// and tries again, until a link is up or the backend is shut down.
func (s *subConn) run() {
	cc := s.cc
	defer cc.wg.Done()
	for {
		cc.mu.Lock()
		if s.shutdown {
			s.running = false
			cc.mu.Unlock()
			return
		}
		addrs, failures := s.addrs, s.failures
		cc.mu.Unlock()

		timeout := max(cc.connect.MinConnectTimeout, cc.connect.Backoff.Delay(failures+1))
		tc, set, addr, how, err := s.dial(addrs, timeout)

		cc.mu.Lock()
		if s.shutdown {
			s.running = false
			cc.mu.Unlock()
			if tc != nil {
				tc.Close()
			}
			return
		}
		if err == nil {
			s.failures, s.err, s.running = 0, nil, false
			s.installLocked(tc, set, addr, how)
			return // installLocked unlocked cc.mu
		}
		s.failures++
		s.fellBack = nil // the next attempt tries the target's own transport first
		s.err = fmt.Errorf("connecting to %s: %w", cc.target, err)
		s.state = connectivity.TransientFailure
		wait := cc.connect.Backoff.Delay(s.failures)
		s.reportLocked()
		cc.mu.Unlock()
		cc.log.Info("dial failed", zap.Error(err), zap.Duration("retry_in", wait))
		cc.resolveNow()

		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
		}
		cc.mu.Lock()
		if !s.shutdown {
			s.state = connectivity.Connecting
			s.reportLocked()
		}
		cc.mu.Unlock()
	}
}

// installLocked makes a new link of tc the one that takes the backend's
// new calls, and starts its reader (and health watch, and, over the
// fallback, the probe of the target's own transport). It is called with
// cc.mu held and unlocks it.
func (s *subConn) installLocked(tc transport.Conn, set wire.Settings, addr resolver.Address, how via) *clientLink {
	cc := s.cc
	l := newClientLink(cc, tc, set)
	l.sc, l.authority = s, cmp.Or(cc.authority, addr.Addr)
	if hs := cc.opts.statsHandlers; len(hs) > 0 {
		// Before calls can take l: they read l.stats. The counters are
		// the connection's own (its transport is the address's, or its
		// fallback).
		l.stats = beginConn(hs, true, tc, nil)
	}
	l.chz = s.chz.NewSocket(socketInfo(tc, "", authInfo(tc), nil, l.Link))
	s.cur, s.curAddr, s.curVia = l, addr, how
	s.state, s.health = connectivity.Ready, connectivity.Connecting
	cc.all[l] = true
	var hctx context.Context
	cc.wg.Add(1)
	if cc.sc.health {
		hctx, s.stopHealth = context.WithCancel(l.Ctx)
		cc.wg.Add(1)
	}
	probe := how == viaFallback && !s.probing
	if probe {
		s.probing = true
		cc.wg.Add(1)
	}
	s.reportLocked()
	cc.mu.Unlock()
	go l.readLoop()
	if hctx != nil {
		go s.watchHealth(hctx, l)
	}
	if probe {
		go s.probe()
	}
	return l
}

// happyEyeballsDelay is how long an attempt has before the next address's
// starts beside it (gRFC A61's Connection Attempt Delay).
const happyEyeballsDelay = 250 * time.Millisecond

// dial connects to one of addrs, as gRFC A61's pick_first does (Happy
// Eyeballs, RFC 8305): the attempts start in order, each as the one before
// fails or happyEyeballsDelay after it started, whichever comes first, and
// run side by side, each for timeout at least; the first to connect wins
// and the others are abandoned (a connection one of them makes anyway is
// closed). So addresses that accept and never answer delay a working one
// by 250 ms each, not by a whole timeout each.
func (s *subConn) dial(addrs []resolver.Address, timeout time.Duration) (transport.Conn, wire.Settings, resolver.Address, via, error) {
	if len(addrs) == 1 {
		tc, set, how, err := s.dialOne(s.ctx, addrs[0], timeout, false)
		return tc, set, addrs[0], how, err
	}
	type attempt struct {
		i   int
		tc  transport.Conn
		set wire.Settings
		how via
		err error
	}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	results := make(chan attempt, len(addrs))
	var won atomic.Bool
	started, failed := 0, 0
	next := func() {
		i := started
		started++
		s.cc.wg.Add(1)
		go func() {
			defer s.cc.wg.Done()
			tc, set, how, err := s.dialOne(ctx, addrs[i], timeout, false)
			if err == nil && !won.CompareAndSwap(false, true) {
				tc.Close() // another attempt won
				return
			}
			results <- attempt{i, tc, set, how, err}
		}()
	}
	next()
	delay := time.NewTimer(happyEyeballsDelay)
	defer delay.Stop()
	errs := make([]error, len(addrs))
	for {
		select {
		case r := <-results:
			if r.err == nil {
				return r.tc, r.set, addrs[r.i], r.how, nil
			}
			errs[r.i] = fmt.Errorf("%s: %w", addrs[r.i].Addr, r.err)
			if failed++; failed == len(addrs) || s.ctx.Err() != nil && failed == started {
				return nil, wire.Settings{}, resolver.Address{}, 0, errors.Join(errs...)
			}
			if started < len(addrs) && s.ctx.Err() == nil {
				next()
				delay.Reset(happyEyeballsDelay)
			}
		case <-delay.C:
			if started < len(addrs) {
				next()
				delay.Reset(happyEyeballsDelay)
			}
		}
	}
}

// dialOne connects to a within timeout (and ctx): the transport's dial,
// then the SETTINGS exchange. own dials with the target's own transport,
// never the fallback (the probe's dial).
func (s *subConn) dialOne(ctx context.Context, a resolver.Address, timeout time.Duration, own bool) (transport.Conn, wire.Settings, via, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc, how, err := s.dialTransport(ctx, a, own)
	if err != nil {
		return nil, wire.Settings{}, 0, err
	}
	set, err := clientHandshake(ctx, tc, wire.Settings{ConnectionWindow: uint32(min(max(s.cc.opts.connWindow, wire.MinConnectionWindow), wire.MaxWindowIncrement))})
	if err != nil {
		tc.Close()
		return nil, wire.Settings{}, 0, err
	}
	return tc, set, how, nil
}

// dialTransport dials a with the target's own transport, or with the
// fallback when a fell back before or no device serves it now; own: with
// the target's own transport only.
func (s *subConn) dialTransport(ctx context.Context, a resolver.Address, own bool) (transport.Conn, via, error) {
	tr, fallback, err := s.cc.transportFor(a)
	if err != nil {
		return nil, 0, err
	}
	if fallback == "" {
		tc, err := s.dialTCP(ctx, tr, a)
		return tc, viaOnly, err
	}
	s.cc.mu.Lock()
	fell := s.fellBack[a.Addr]
	s.cc.mu.Unlock()
	if fell && !own {
		tc, err := s.dialFallback(ctx, a, fallback, transport.ErrNoDevice)
		return tc, viaFallback, err
	}
	tc, err := s.cc.dial(ctx, tr, a)
	if err != nil && !own && errors.Is(err, transport.ErrNoDevice) {
		s.fallBack(a)
		s.cc.log.Warn("no device serves the address: falling back", zap.String("addr", a.Addr), zap.String("fallback", fallback), zap.Error(err))
		tc, err := s.dialFallback(ctx, a, fallback, err)
		return tc, viaFallback, err
	}
	return tc, viaPrimary, err
}

// fallBack makes a's next dials use the fallback transport.
func (s *subConn) fallBack(a resolver.Address) {
	s.cc.mu.Lock()
	s.fallBackLocked(a)
	s.cc.mu.Unlock()
}

func (s *subConn) fallBackLocked(a resolver.Address) {
	if s.fellBack == nil {
		s.fellBack = make(map[string]bool)
	}
	s.fellBack[a.Addr] = true
}

// clientHandshake sends the client's SETTINGS, the first frame either side
// sends, and waits within ctx for the server's (docs/wire.md, "SETTINGS"):
// until it came the link takes no call, so the first burst already keeps
// to the server's limit, and a server that answers nothing fails the dial
// rather than the calls.
func clientHandshake(ctx context.Context, tc transport.Conn, own wire.Settings) (wire.Settings, error) {
	if err := tc.Send(ctx, wire.AppendSettings(nil, own)); err != nil {
		return wire.Settings{}, err
	}
	b, err := tc.Recv(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return wire.Settings{}, fmt.Errorf("no SETTINGS from the server: %w", ctx.Err())
		}
		return wire.Settings{}, err
	}
	defer b.Release()
	h, body, err := wire.ParseHeader(b.Bytes())
	switch {
	case err != nil:
		return wire.Settings{}, fmt.Errorf("the server's first frame: %w", err)
	case h.Kind == wire.KindSettings:
		set, err := wire.ParseSettings(body)
		if err != nil {
			return wire.Settings{}, fmt.Errorf("the server's SETTINGS: %w", err)
		}
		return set, nil
	case h.Kind == wire.KindGoAway:
		if ga, err := wire.ParseGoAway(body); err == nil {
			return wire.Settings{}, fmt.Errorf("the server refused the connection (%v): %s", codes.Code(ga.Code), ga.Message)
		}
	}
	return wire.Settings{}, fmt.Errorf("the server's first frame is %v, not SETTINGS", h.Kind)
}

// dialFallback dials a with the fallback transport; why is the error that
// made it fall back.
func (s *subConn) dialFallback(ctx context.Context, a resolver.Address, fallback string, why error) (transport.Conn, error) {
	tr, ok := transport.Lookup(fallback)
	if !ok {
		return nil, fmt.Errorf("%w (and no transport is registered for the fallback scheme %q)", why, fallback)
	}
	return s.dialTCP(ctx, tr, a)
}

// dialTCP dials a with tr, rdmarpc over TCP; for an auto:// address whose
// server answers in HTTP/2 it dials the gRPC protocol instead: auto://
// tries RDMA, then rdmarpc over TCP, then gRPC (a gRPC-go or grpc-java
// server).
func (s *subConn) dialTCP(ctx context.Context, tr transport.Transport, a resolver.Address) (transport.Conn, error) {
	tc, err := s.cc.dial(ctx, tr, a)
	if err != nil && a.Transport == resolver.TransportAuto && errors.Is(err, transport.ErrHTTP2Server) {
		if g, ok := transport.Lookup("grpc"); ok {
			s.cc.log.Info("the server speaks gRPC over HTTP/2: dialing it with the gRPC protocol", zap.String("addr", a.Addr))
			return s.cc.dial(ctx, g, a)
		}
	}
	return tc, err
}

// drain stops new calls on l; it closes with st once its calls end.
func (l *clientLink) drain(st *status.Status) {
	l.mu.Lock()
	l.draining = true
	idle := l.idleDraining()
	l.mu.Unlock()
	l.slots.Close()
	if idle {
		l.Close(st)
	}
}
