package rdma

import (
	"context"
	"fmt"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/rdmadev"
)

// Listen listens on addr ("ip:port"). It fails with an error wrapping
// transport.ErrNoDevice when no RDMA device serves ip (0.0.0.0: the first
// active device), so callers can fall back to TCP.
func (t *Transport) Listen(addr string) (transport.Listener, error) {
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
		return nil, fmt.Errorf("rdma: listen %s: %w", addr, err)
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
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{t: t, dev: dev, nl: nl, ctx: ctx, cancel: cancel, ready: make(chan *conn)}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// listener accepts bootstrap connections in its goroutine and runs each
// handshake in one of its own, so a slow or hostile peer holds up nobody.
type listener struct {
	t      *Transport
	dev    *device
	nl     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan *conn
	wg     sync.WaitGroup
	once   sync.Once
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		boot, err := l.nl.Accept()
		if err != nil {
			if l.ctx.Err() == nil {
				l.t.o.Logger.Error("accept failed; listener stops", zap.Error(err))
				l.cancel()
			}
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.t.handshakeServer(l.ctx, boot)
			if err != nil {
				if l.ctx.Err() == nil {
					l.t.o.Logger.Warn("refused connection", zap.Stringer("peer", boot.RemoteAddr()), zap.Error(err))
				}
				boot.Close()
				return
			}
			select {
			case l.ready <- c:
			case <-l.ctx.Done():
				c.Close()
			}
		}()
	}
}

func (l *listener) Accept(ctx context.Context) (transport.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		return nil, fmt.Errorf("%w: listener closed", transport.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.nl.Close()
		l.wg.Wait()
		l.t.release(l.dev)
	})
	return err
}

func (l *listener) Addr() net.Addr { return l.nl.Addr() }
