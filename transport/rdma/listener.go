package rdma

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/internal/accept"
)

// Listen listens on addr ("ip:port"), which need not be an address of an
// RDMA device: the server offers its clients the endpoints Options.Devices,
// Netdevs and GIDIndex choose (default: every ACTIVE port), whatever
// address they dial (docs/rdma.md, "Endpoints"). It fails with an error
// wrapping transport.ErrNoDevice when there is none, or ip is a loopback
// address, so callers can fall back to TCP.
func (t *Transport) Listen(addr string) (transport.Listener, error) {
	return t.ListenWithCredentials(addr, nil)
}

// ListenWithCredentials is Listen with every bootstrap connection secured
// by creds (TLS) before the hellos; nil creds: plaintext. A client that
// fails the credentials' handshake is refused and logged like one with a
// bad hello. It implements transport.CredentialsListener, and the listener
// transport.SecuredListener.
func (t *Transport) ListenWithCredentials(addr string, creds credentials.TransportCredentials) (transport.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if host == "" {
		ip = net.IPv4zero
	}
	if ip == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			return nil, fmt.Errorf("rdma: listen %s: cannot resolve %q: %v", addr, host, err)
		}
		ip = ips[0]
	}
	if ip.IsLoopback() {
		// No RDMA device serves loopback, and only this host's clients
		// reach it.
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, noDevice(fmt.Errorf("rdma: %v is a loopback address: %w", ip, rdmadev.ErrNoDevice)))
	}
	srv, err := t.serve()
	if err != nil {
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, err)
	}
	nl, err := net.Listen("tcp", addr)
	if err != nil {
		srv.close()
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, err)
	}
	log := accept.NewLog(t.o.Logger, "")
	l := accept.NewWithOptions(nl, func(ctx context.Context, boot net.Conn) (transport.Conn, error) {
		var auth credentials.AuthInfo
		if creds != nil {
			sec, ai, err := t.serverCredentials(ctx, boot, creds)
			if err != nil {
				t.counters.refused.Add(1)
				return nil, err
			}
			boot, auth = sec, ai
		}
		boot, tc, err := t.tcpPeer(ctx, boot, auth, log.Refused)
		if tc != nil || err != nil {
			return tc, err
		}
		c, err := t.handshakeServer(ctx, boot, srv)
		if err != nil {
			return nil, err
		}
		if err := t.bindQP(ctx, c, auth); err != nil {
			c.Close()
			t.counters.refused.Add(1)
			return nil, err
		}
		return secured(c, auth), nil
	}, accept.Options{Log: log, OnClose: srv.close})
	return &listener{Listener: l, creds: creds}, nil
}

// listener is the accept loop and the credentials it runs.
type listener struct {
	*accept.Listener
	creds credentials.TransportCredentials
}

// Credentials are the transport credentials every bootstrap connection
// runs; nil: none.
func (l *listener) Credentials() credentials.TransportCredentials { return l.creds }

// Scheme says the listener's connections are rdma's: its address is its
// TCP bootstrap's (channelz shows the scheme).
func (l *listener) Scheme() string { return "rdma" }

// serving is what a listener offers its clients: the current offering,
// looked up again at most once every endpointsRefresh, when a client asks
// (an address, a port or a device that came or went since Listen).
type serving struct {
	t *Transport
	// find looks the endpoints up and open opens an offering of them:
	// rdmadev.Endpoints under the options' selection and t.offering, but
	// for tests.
	find  func() ([]rdmadev.Endpoint, error)
	open  func([]rdmadev.Endpoint) (*offering, error)
	every time.Duration // endpointsRefresh when the listener began

	mu      sync.Mutex
	cur     *offering
	looked  time.Time // when cur's endpoints were last looked up
	looking bool      // a lookup is under way
	closed  bool
}

// offering is one version of what a listener offers: its endpoints, the
// answer to a client's query that lists them, and their devices, held open
// while they are offered. A handshake keeps the offering it answered with:
// the endpoint its client's hello names is an index into that one.
type offering struct {
	answer []byte
	devs   []*device
	eps    []rdmadev.Endpoint // an entry changes when its address moves (serving.endpoint), under serving.mu
}

// endpointsRefresh: how often, at most, a listener looks its endpoints up
// again. The lookup reads the GID tables (sysfs; slow under emulation) and
// runs before the handshake gate, for any client that asks: the interval,
// not the clients, bounds what it costs.
var endpointsRefresh = 5 * time.Second

// current is the offering to answer a client's query with, looked up again
// first if the last lookup is older than endpointsRefresh (one goroutine
// looks; the others answer with what is there meanwhile).
func (s *serving) current() *offering {
	s.mu.Lock()
	o := s.cur
	look := !s.looking && !s.closed && time.Since(s.looked) >= s.every
	if look {
		s.looking = true
	}
	s.mu.Unlock()
	if !look {
		return o
	}
	n := s.lookup(o)
	s.mu.Lock()
	s.looking, s.looked = false, time.Now()
	if n == nil || s.closed {
		s.mu.Unlock()
		if n != nil {
			n.release(s.t)
		}
		return s.cur
	}
	old := s.cur
	s.cur = n
	s.mu.Unlock()
	old.release(s.t) // devices still offered hold a reference of n's
	s.t.o.Logger.Info("the RDMA endpoints this server offers changed",
		zap.Stringers("was", gidsOf(old.eps)), zap.Stringers("now", gidsOf(n.eps)))
	return n
}

// lookup finds the endpoints the options select now: nil if they are
// those of o (or none are found: a lookup that fails, or a moment with no
// ACTIVE port, keeps what is offered), else a new offering of them.
func (s *serving) lookup(o *offering) *offering {
	eps, err := s.find()
	if err != nil || len(eps) == 0 {
		return nil
	}
	eps = eps[:min(len(eps), maxEndpoints)]
	s.mu.Lock()
	same := sameEndpoints(o.eps, eps)
	s.mu.Unlock()
	if same {
		return nil
	}
	n, err := s.open(eps)
	if err != nil {
		s.t.o.Logger.Warn("the RDMA endpoints changed, and opening their devices failed: offering the old ones", zap.Error(err))
		return nil
	}
	return n
}

// sameEndpoints reports whether a and b are the same endpoints in the same
// order (an address that moved to another GID index is the same endpoint:
// serving.endpoint follows it).
func sameEndpoints(a, b []rdmadev.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Device != b[i].Device || a[i].Port != b[i].Port || a[i].GID != b[i].GID {
			return false
		}
	}
	return true
}

func gidsOf(eps []rdmadev.Endpoint) []fmt.Stringer {
	out := make([]fmt.Stringer, len(eps))
	for i, ep := range eps {
		out[i] = net.IP(ep.GID[:])
	}
	return out
}

// endpoint is the k-th endpoint of o, k < len(o.eps), checked against the
// GID table first: an address removed and added again since it was looked
// up holds another entry now (its GID, which the answer names, is the
// same), and the old index would fail every handshake at RTR. The endpoint
// found then replaces the offered one.
func (s *serving) endpoint(o *offering, k int) (rdmadev.Endpoint, error) {
	s.mu.Lock()
	ep := o.eps[k]
	s.mu.Unlock()
	if rdmadev.Current(ep) {
		return ep, nil
	}
	n, err := s.t.relocate(ep)
	if err != nil {
		return ep, err
	}
	s.mu.Lock()
	if o.eps[k] == ep {
		o.eps[k] = n
		s.t.logMoved(ep, n)
	}
	s.mu.Unlock()
	return n, nil
}

// serve looks up the endpoints the options select (at most maxEndpoints)
// and opens their devices: a build or machine that cannot use them fails
// here, not at the first connection.
func (t *Transport) serve() (*serving, error) {
	eps, err := rdmadev.Endpoints(t.o.selection())
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		sel := t.o.selection()
		return nil, noDevice(fmt.Errorf("rdma: no ACTIVE RDMA port with a usable GID (devices %q, netdevs %q, GID index %d): %w",
			sel.Devices, sel.Netdevs, sel.GIDIndex, rdmadev.ErrNoDevice))
	}
	o, err := t.offering(eps[:min(len(eps), maxEndpoints)])
	if err != nil {
		return nil, err
	}
	return newServing(t, o), nil
}

// newServing serves o, looking the endpoints up again as current says.
func newServing(t *Transport, o *offering) *serving {
	return &serving{t: t, cur: o, looked: time.Now(), every: endpointsRefresh,
		find: func() ([]rdmadev.Endpoint, error) { return rdmadev.Endpoints(t.o.selection()) },
		open: t.offering}
}

// offering opens the devices of eps and makes the answer that lists them.
func (t *Transport) offering(eps []rdmadev.Endpoint) (*offering, error) {
	o := &offering{}
	var offers []offered
	for _, ep := range eps {
		dev, err := t.acquire(ep.Device)
		if err != nil {
			o.release(t)
			return nil, err
		}
		o.devs = append(o.devs, dev)
		pa, err := dev.ctx.QueryPort(ep.Port)
		if err != nil {
			o.release(t)
			return nil, err
		}
		o.eps = append(o.eps, ep)
		offers = append(offers, offer(ep, pa.LID))
	}
	o.answer = encodeEndpoints(offers)
	return o, nil
}

func (o *offering) release(t *Transport) {
	for _, d := range o.devs {
		t.release(d)
	}
	o.devs = nil
}

// close ends the offering: the devices are released, and no lookup opens
// them again.
func (s *serving) close() {
	s.mu.Lock()
	s.closed = true
	o := s.cur
	s.mu.Unlock()
	o.release(s.t)
}
