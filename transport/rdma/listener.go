package rdma

import (
	"context"
	"fmt"
	"net"
	"sync"

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

// serving is what a listener offers: its endpoints, the answer to a
// client's query that lists them, and the devices it holds open.
type serving struct {
	answer []byte
	devs   []*device
	t      *Transport

	mu  sync.Mutex
	eps []rdmadev.Endpoint // as offered; an entry changes when its address moves (endpoint)
}

// endpoint is the k-th endpoint offered, k < len(eps), checked against the
// GID table first: an address removed and added again since Listen holds
// another entry now (its GID, which the answer names, is the same), and
// the old index would fail every handshake at RTR. The endpoint found then
// replaces the offered one.
func (s *serving) endpoint(k int) (rdmadev.Endpoint, error) {
	s.mu.Lock()
	ep := s.eps[k]
	s.mu.Unlock()
	if rdmadev.Current(ep) {
		return ep, nil
	}
	n, err := s.t.relocate(ep)
	if err != nil {
		return ep, err
	}
	s.mu.Lock()
	if s.eps[k] == ep {
		s.eps[k] = n
		s.t.logMoved(ep, n)
	}
	s.mu.Unlock()
	return n, nil
}

// serve opens the devices of the endpoints the options select (at most
// maxEndpoints): a build or machine that cannot use them fails here, not
// at the first connection; they stay open while listening.
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
	eps = eps[:min(len(eps), maxEndpoints)]
	s := &serving{t: t}
	var offers []offered
	for _, ep := range eps {
		dev, err := t.acquire(ep.Device)
		if err != nil {
			s.close()
			return nil, err
		}
		s.devs = append(s.devs, dev)
		pa, err := dev.ctx.QueryPort(ep.Port)
		if err != nil {
			s.close()
			return nil, err
		}
		s.eps = append(s.eps, ep)
		offers = append(offers, offer(ep, pa.LID))
	}
	s.answer = encodeEndpoints(offers)
	return s, nil
}

func (s *serving) close() {
	for _, d := range s.devs {
		s.t.release(d)
	}
	s.devs = nil
}
