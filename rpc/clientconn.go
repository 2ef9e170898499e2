package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/resolver"
	_ "github.com/rdmarpc/rdmarpc/resolver/dns" // the schemes a target may name
	_ "github.com/rdmarpc/rdmarpc/resolver/passthrough"
	_ "github.com/rdmarpc/rdmarpc/resolver/static"
	_ "github.com/rdmarpc/rdmarpc/resolver/unix"
	"github.com/rdmarpc/rdmarpc/rpc/internal/timers"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// ClientConn is a client's connection to one target: a name its resolver
// turns into addresses, and the connections to backends its balancer
// keeps (package balancer; pick_first: one backend at a time;
// round_robin: every backend), each call going where the balancer's
// Picker says. It is
// safe for concurrent use: calls are multiplexed on the connections. When a
// connection breaks, or the server asks to go away, calls move to another
// connection (or a new one) and the resolver is asked to look again.
type ClientConn struct {
	target  string
	parsed  resolver.Target
	builder resolver.Builder
	opts    dialOptions
	connect ConnectParams
	sc      *serviceConfig
	log     *zap.Logger
	invoke  UnaryInvoker // the interceptor chain, ending in cc.retryCall
	// streamer is the stream interceptor chain, ending in
	// cc.newStreamFromConfig.
	streamer Streamer
	throttle *retryThrottle // nil without retryThrottling
	uaMD     metadata.MD    // {"user-agent": …}, shared read-only by calls
	// authority is the name a TLS handshake checks and per-RPC
	// credentials are told, when the target names a host its resolver
	// turns into other addresses (dns); "" means each address's own.
	authority string
	ctx       context.Context
	cancel    context.CancelFunc // ends every dial and backoff wait, at Close
	// exited is set once the resolver was started: calls then skip
	// exitIdle's lock.
	exited atomic.Bool
	// For the idle timeout: calls and streams in progress, when the last
	// ended (unix ns), how often the timer looked (for tests), and the
	// timer (on the process's shared timer goroutine).
	active     atomic.Int64
	lastEnd    atomic.Int64
	idleChecks atomic.Int64
	idleTimer  *timers.Timer

	mu       sync.Mutex
	state    connectivity.State
	changed  chan struct{} // closed and replaced at every change of state or backend
	started  bool          // the resolver is built, or being built
	gen      int           // counts the times the ClientConn went idle: a resolver of an older generation is ignored
	res      resolver.Resolver
	buildErr error                // the builder's error: the target cannot be resolved at all
	bal      *ccBalancer          // the balancer of this generation; nil while idle
	picker   balancer.Picker      // the balancer's latest; nil until it published one
	subs     []*subConn           // the balancer's, not shut down
	all      map[*clientLink]bool // every live link, draining ones too
	closed   bool
	wg       sync.WaitGroup // link readers, dials, health watches, drains, the idle monitor, the serializer
	ser      serializer     // runs the balancer's calls

	chz *channelz.Channel // what channelz shows of it, from newClient to Close
}

// NewClient makes a ClientConn for target without connecting: it connects
// on its first call or on Connect, as gRPC-go's NewClient. The target names
// the resolver and the transport (docs/names-and-credentials.md):
// "dns:///kv.prod:7070", "rdma+dns:///kv.prod:7070",
// "ipv4:10.0.0.1:7070,10.0.0.2:7070", "tcp://h:1", "rdma://h:1"; a target
// without a scheme is resolved with resolver.GetDefaultScheme (dns). Errors
// are a bad target, an unknown scheme or a bad service config.
func NewClient(target string, opts ...DialOption) (*ClientConn, error) {
	return newClient(target, "", opts)
}

// Dial connects to target as NewClient does, and returns once the first
// connection is up, or with an Unavailable error when the first attempt
// failed. A target without a scheme is one address (passthrough), as for
// gRPC-go's Dial.
func Dial(ctx context.Context, target string, opts ...DialOption) (*ClientConn, error) {
	cc, err := newClient(target, "passthrough", opts)
	if err != nil {
		return nil, err
	}
	cc.Connect()
	for {
		switch s := cc.GetState(); s {
		case connectivity.Ready:
			return cc, nil
		case connectivity.TransientFailure:
			err := cc.failure()
			cc.mu.Lock()
			if cc.buildErr != nil {
				// A target no resolver can take is the caller's error.
				err = status.Error(codes.InvalidArgument, cc.buildErr.Error())
			}
			cc.mu.Unlock()
			cc.Close()
			if st := callerEnded(ctx); st != nil {
				// The caller gave up, which says nothing of the server.
				return nil, st.Err()
			}
			return nil, err
		default:
			if !cc.WaitForStateChange(ctx, s) {
				cc.Close()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
}

func newClient(target, defaultScheme string, opts []DialOption) (*ClientConn, error) {
	o := dialOptions{settings: defaultSettings()}
	for _, opt := range opts {
		opt(&o)
	}
	if o.connect.Backoff.BaseDelay <= 0 {
		o.connect.Backoff = backoff.DefaultConfig
	}
	if o.connect.MinConnectTimeout <= 0 {
		o.connect.MinConnectTimeout = 20 * time.Second
	}
	if o.contextDialer != nil {
		// The dialer is the transport of every address, as WithTransport.
		dt, err := newDialerTransport(o.contextDialer)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		o.transport = dt
	}
	if err := checkPerRPC(&o); err != nil {
		return nil, err
	}
	if err := wire.CheckValue([]byte(userAgentKey), []byte(o.userAgent)); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "WithUserAgent: %v", err)
	}
	parsed, b, err := parseClientTarget(target, defaultScheme, o.transport != nil, o.resolvers)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	sc := defaultServiceConfig()
	if o.serviceConfig != "" {
		if sc, err = parseServiceConfig(o.serviceConfig); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	cc := &ClientConn{
		target:  target,
		parsed:  parsed,
		builder: b,
		connect: o.connect,
		sc:      sc,
		opts:    o,
		log:     o.log.Named("rpc.client").With(zap.String("target", target)),
		changed: make(chan struct{}),
		all:     make(map[*clientLink]bool),
		uaMD:    connMD(o.userAgent),
	}
	cc.ser.wg = &cc.wg
	cc.chz = channelz.NewChannel(target, cc.GetState)
	if parsed.URL.Scheme == "dns" {
		cc.authority = parsed.Endpoint()
	}
	if sc.throttle != nil {
		cc.throttle = newRetryThrottle(*sc.throttle)
	}
	cc.ctx, cc.cancel = context.WithCancel(context.Background())
	cc.invoke = chainClient(o.interceptors, cc.retryCall)
	cc.streamer = chainStreamClient(o.streamInterceptors, func(ctx context.Context, desc *StreamDesc, cc *ClientConn, method string, opts ...CallOption) (ClientStream, error) {
		return cc.newStreamFromConfig(ctx, desc, method, opts...)
	})
	if o.idleTimeout > 0 {
		cc.lastEnd.Store(time.Now().UnixNano())
		cc.idleTimer = timers.Default.NewTimer(cc.idleCheck)
		cc.idleTimer.Reset(o.idleTimeout)
	}
	return cc, nil
}

// parseClientTarget is resolver.ParseTarget, with defaultScheme (if not
// "") for a target without a scheme. With a transport given by
// WithTransport, "x://addr" whose scheme nothing registers is still one
// address, as before resolvers existed (pipe:// in tests).
func parseClientTarget(target, defaultScheme string, ownTransport bool, local []resolver.Builder) (resolver.Target, resolver.Builder, error) {
	for _, b := range local {
		scheme, _, _ := strings.Cut(target, ":")
		tp, rs, prefixed := strings.Cut(scheme, "+")
		if !prefixed {
			tp, rs = "", scheme
		}
		if strings.EqualFold(rs, b.Scheme()) {
			u, err := url.Parse(target)
			if err != nil {
				return resolver.Target{}, nil, fmt.Errorf("rpc: bad target %q: %w", target, err)
			}
			u.Scheme = strings.ToLower(rs)
			return resolver.Target{URL: *u, Transport: tp}, b, nil
		}
	}
	if defaultScheme != "" && !strings.Contains(target, ":/") && resolver.Get(strings.SplitN(target, ":", 2)[0]) == nil {
		// No scheme: "host:port", "[::1]:1".
		target = defaultScheme + ":///" + target
	}
	t, b, err := resolver.ParseTarget(target)
	if err != nil && ownTransport && errors.Is(err, resolver.ErrUnknownScheme) {
		if _, addr, ok := strings.Cut(target, "://"); ok && addr != "" && !strings.Contains(addr, "/") {
			if pb := resolver.Get("passthrough"); pb != nil {
				t, _, perr := resolver.ParseTarget("passthrough:///" + addr)
				return t, pb, perr
			}
		}
	}
	return t, b, err
}

// Target returns the target the ClientConn was made with.
func (cc *ClientConn) Target() string { return cc.target }

// Connect makes an Idle ClientConn start connecting, without waiting.
func (cc *ClientConn) Connect() { cc.exitIdle() }

// GetState returns the ClientConn's state: Idle until its first call or
// Connect, Ready while a backend takes calls, Connecting while one is being
// connected, TransientFailure when every backend failed its last attempt
// (or the resolver has no address), Shutdown after Close.
func (cc *ClientConn) GetState() connectivity.State {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.state
}

// WaitForStateChange waits until the state differs from source (true) or
// ctx ends (false).
func (cc *ClientConn) WaitForStateChange(ctx context.Context, source connectivity.State) bool {
	for {
		cc.mu.Lock()
		s, ch := cc.state, cc.changed
		cc.mu.Unlock()
		if s != source {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// Close closes every connection and the resolver; calls in progress fail
// with Canceled.
func (cc *ClientConn) Close() error {
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		cc.wg.Wait()
		return nil
	}
	cc.closed = true
	cc.started = true // a call from now on starts no resolver
	if cc.idleTimer != nil {
		cc.idleTimer.Stop()
	}
	res := cc.res
	cc.res = nil
	if cc.bal != nil {
		cc.bal.closeLocked()
		cc.bal = nil
	}
	for _, s := range cc.subs {
		s.shutdownLocked()
	}
	cc.subs, cc.picker = nil, nil
	links := make([]*clientLink, 0, len(cc.all))
	for l := range cc.all {
		links = append(links, l)
	}
	cc.setStateLocked(connectivity.Shutdown)
	cc.mu.Unlock()
	cc.chz.Close()
	cc.cancel()
	if res != nil {
		res.Close()
	}
	for _, l := range links {
		l.Close(status.New(codes.Canceled, "client connection closing"))
	}
	cc.wg.Wait()
	return nil
}

var errClientClosed = status.Error(codes.Canceled, "client connection closing")

// exitIdle builds the balancer and the resolver, once. It holds no lock
// while the resolver's builder runs, since a builder may report its first
// state before it returns.
func (cc *ClientConn) exitIdle() {
	if cc.exited.Load() {
		return
	}
	cc.mu.Lock()
	if cc.started {
		cc.mu.Unlock()
		return
	}
	cc.started = true
	cc.exited.Store(true)
	cc.setStateLocked(connectivity.Connecting)
	gen := cc.gen
	w := &ccBalancer{cc: cc}
	cc.bal = w
	cc.ser.schedule(func() {
		if !w.closed.Load() {
			w.b = cc.sc.balancer.Build(w, balancer.BuildOptions{Target: cc.parsed})
		}
	})
	w.do(func(b balancer.Balancer) { b.ExitIdle() })
	cc.mu.Unlock()
	r, err := cc.builder.Build(cc.parsed, ccResolver{cc, gen}, resolver.BuildOptions{})
	cc.mu.Lock()
	if cc.closed || cc.gen != gen { // closed, or idle again, while it was built
		cc.mu.Unlock()
		if r != nil {
			r.Close()
		}
		return
	}
	if err != nil {
		cc.buildErr = err
		cc.log.Warn("cannot resolve target", zap.Error(err))
		cc.resolverErrorLocked(err)
	} else {
		cc.res = r
	}
	cc.mu.Unlock()
}

// resolveNow asks the resolver to look again (a connection failed).
func (cc *ClientConn) resolveNow() {
	cc.mu.Lock()
	r := cc.res
	cc.mu.Unlock()
	if r != nil {
		r.ResolveNow(resolver.ResolveNowOptions{})
	}
}

// ccResolver is the ClientConn as its resolver sees it.
type ccResolver struct {
	cc  *ClientConn
	gen int
}

// UpdateState hands the addresses to the balancer, and returns once it
// took them (as gRPC-go's does), so that calls made after it returns go
// where they say.
func (r ccResolver) UpdateState(s resolver.State) error {
	cc := r.cc
	s = s.Complete()
	if len(s.Addresses) == 0 {
		r.ReportError(errors.New("resolver reported no addresses"))
		return errors.New("rpc: no addresses")
	}
	cc.mu.Lock()
	if cc.closed || cc.gen != r.gen {
		cc.mu.Unlock()
		return nil
	}
	cc.log.Debug("resolved", zap.Stringer("state", s))
	cfg := cc.sc.lbConfig
	ran := cc.bal.do(func(b balancer.Balancer) {
		b.UpdateClientConnState(balancer.ClientConnState{ResolverState: s, BalancerConfig: cfg})
	})
	cc.mu.Unlock()
	<-ran
	return nil
}

// ReportError tells the balancer, and returns once it was told.
func (r ccResolver) ReportError(err error) {
	cc := r.cc
	cc.mu.Lock()
	if cc.closed || cc.gen != r.gen {
		cc.mu.Unlock()
		return
	}
	cc.log.Info("resolver error", zap.Error(err))
	ran := cc.resolverErrorLocked(err)
	cc.mu.Unlock()
	<-ran
}

// resolverErrorLocked tells the balancer the resolver failed: without
// addresses in use, calls fail with it.
func (cc *ClientConn) resolverErrorLocked(err error) <-chan struct{} {
	err = fmt.Errorf("resolving %s: %w", cc.target, err)
	return cc.bal.do(func(b balancer.Balancer) { b.ResolverError(err) })
}

// setStateLocked sets the state and wakes whoever waits for a change.
func (cc *ClientConn) setStateLocked(s connectivity.State) {
	cc.state = s
	cc.notifyLocked()
}

// notifyLocked wakes the calls and WaitForStateChange waiting for a change.
func (cc *ClientConn) notifyLocked() {
	close(cc.changed)
	cc.changed = make(chan struct{})
}

// failure is the error calls fail with in TransientFailure: the current
// picker's.
func (cc *ClientConn) failure() error {
	cc.mu.Lock()
	p := cc.picker
	cc.mu.Unlock()
	if p != nil {
		if _, err := p.Pick(balancer.PickInfo{Ctx: context.Background()}); err != nil && !errors.Is(err, balancer.ErrNoSubConnAvailable) {
			if isStatusError(err) {
				return err
			}
			return pickError(err)
		}
	}
	return status.Errorf(codes.Unavailable, "%s: no backend is ready", cc.target)
}

// link returns the connection a new call to method goes to, as the
// balancer's picker says, and the picker's Done (nil without one). It
// waits for a picker that has one: while the ClientConn connects, and in
// TransientFailure with waitForReady, until ctx ends; without
// waitForReady a failed pick fails the call at once with Unavailable.
func (cc *ClientConn) link(ctx context.Context, method string, waitForReady bool, rs *rpcStats) (*clientLink, func(balancer.DoneInfo), error) {
	for waited := false; ; waited = true {
		cc.exitIdle() // again after a wait: the ClientConn may have gone idle
		cc.mu.Lock()
		if cc.closed {
			cc.mu.Unlock()
			return nil, nil, errClientClosed
		}
		p, ch := cc.picker, cc.changed
		cc.mu.Unlock()
		l, done, err := cc.pick(ctx, p, method, waitForReady)
		if l != nil && waited && rs != nil {
			// The pick waited for the picker to change, as gRPC-go's
			// reports a blocked pick.
			rs.handle(&stats.DelayedPickComplete{})
		}
		if l != nil || err != nil {
			return l, done, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// forget stops routing new calls to l (it is draining or gone); its
// backend goes Idle (the balancer says when it connects again:
// round_robin at once, pick_first at the next call), or, when l failed
// over a transport with a fallback, reconnects at once over the fallback
// (failover.go); and the resolver is asked to look again.
func (cc *ClientConn) forget(l *clientLink, gone bool) {
	failed := l.failed(gone) // before cc.mu: l.mu is never taken inside it
	cc.mu.Lock()
	lost := false
	if s := l.sc; s != nil && s.cur == l {
		lost = s.lostLocked(failed)
		cc.notifyLocked() // a call that picked l picks again
	}
	if gone {
		delete(cc.all, l)
	}
	cc.mu.Unlock()
	if lost {
		cc.resolveNow()
	}
}

// callerEnded is the status of a call whose context has ended, or whose
// deadline has passed although the context has not said so yet (a
// transport's own timer, set from the deadline, can fire first).
func callerEnded(ctx context.Context) *status.Status {
	if st := status.FromContextError(ctx.Err()); st != nil {
		return st
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	}
	return nil
}

// transportFor is the transport an address is dialed with, and the scheme
// to fall back to on transport.ErrNoDevice ("" for none).
func (cc *ClientConn) transportFor(a resolver.Address) (transport.Transport, string, error) {
	if cc.opts.transport != nil {
		return cc.opts.transport, cc.opts.fallback, nil
	}
	scheme, fallback := a.Transport, cc.opts.fallback
	switch scheme {
	case "":
		scheme = "tcp"
	case resolver.TransportAuto:
		scheme, fallback = "rdma", "tcp"
		if _, ok := transport.Lookup(scheme); !ok {
			// A program without the RDMA transport has no device either.
			scheme, fallback = "tcp", ""
		}
	}
	tr, ok := transport.Lookup(scheme)
	if !ok {
		return nil, "", fmt.Errorf("no transport registered for scheme %q (import github.com/rdmarpc/rdmarpc/transport/%s)", scheme, scheme)
	}
	return tr, fallback, nil
}

// WithDefaultServiceConfig sets the service config in gRPC's JSON form
// (https://github.com/grpc/grpc/blob/master/doc/service_config.md), as
// gRPC-go's option does. rdmarpc reads loadBalancingConfig (a policy
// registered with balancer.Register: pick_first, the default, round_robin,
// or one's own; the first of the list registered wins, none is an error),
// loadBalancingPolicy, methodConfig's name, waitForReady, timeout
// and retryPolicy, retryThrottling and healthCheckConfig; it ignores other
// fields. NewClient and Dial return an InvalidArgument error for a config
// they cannot read.
func WithDefaultServiceConfig(config string) DialOption {
	return func(o *dialOptions) { o.serviceConfig = config }
}

// WithResolvers makes resolver builders known to this ClientConn only, as
// gRPC-go's option: a target of one of their schemes is theirs, whatever
// the global registry holds (resolver.Register).
func WithResolvers(rs ...resolver.Builder) DialOption {
	return func(o *dialOptions) { o.resolvers = append(o.resolvers, rs...) }
}
