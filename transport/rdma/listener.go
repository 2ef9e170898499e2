package rdma

import (
	"context"
	"fmt"
	"net"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/internal/accept"
)

// Listen listens on addr ("ip:port"). It fails with an error wrapping
// transport.ErrNoDevice when no RDMA device serves ip (0.0.0.0: the first
// active device), so callers can fall back to TCP.
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
	ep, err := rdmadev.ForIP(ip)
	if err != nil {
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, noDevice(err))
	}
	// Open the device now: a build or machine that cannot use it fails
	// here, not at the first connection; it stays open while listening.
	dev, err := t.acquire(ep.Device)
	if err != nil {
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, err)
	}
	nl, err := net.Listen("tcp", addr)
	if err != nil {
		t.release(dev)
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
		c, err := t.handshakeServer(ctx, boot)
		if err != nil {
			return nil, err
		}
		if err := t.bindQP(ctx, c, auth); err != nil {
			c.Close()
			t.counters.refused.Add(1)
			return nil, err
		}
		return secured(c, auth), nil
	}, accept.Options{Log: log, OnClose: func() { t.release(dev) }})
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
