package tcp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
)

// Listen listens on addr ("host:port"; port 0 picks one).
func (t *Transport) Listen(addr string) (transport.Listener, error) {
	nl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{t: t, nl: nl, ctx: ctx, cancel: cancel, ready: make(chan *conn)}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// listener accepts sockets in its own goroutine and runs each handshake in
// a goroutine of its own, so a slow or hostile peer never holds up others.
// All of them exit on Close, which waits for them.
type listener struct {
	t      *Transport
	nl     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	ready  chan *conn // handshaken connections waiting for Accept
	wg     sync.WaitGroup
	once   sync.Once
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	log := l.t.o.Logger
	for {
		nc, err := l.nl.Accept()
		if err != nil {
			if l.ctx.Err() == nil {
				log.Error("accept failed; listener stops", zap.Error(err))
				l.cancel()
			}
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.handshake(nc)
		}()
	}
}

func (l *listener) handshake(nc net.Conn) {
	if l.t.o.TLS != nil {
		nc = tls.Server(nc, l.t.o.TLS)
	}
	c, err := l.t.handshake(l.ctx, nc)
	if err != nil {
		if l.ctx.Err() == nil {
			l.t.o.Logger.Warn("refused connection", zap.Stringer("peer", nc.RemoteAddr()), zap.Error(err))
		}
		nc.Close()
		return
	}
	select {
	case l.ready <- c:
	case <-l.ctx.Done():
		c.Close()
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

// Close stops accepting, abandons handshakes in progress, and waits for the
// listener's goroutines to exit.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.nl.Close()
		l.wg.Wait()
	})
	return err
}

func (l *listener) Addr() net.Addr { return l.nl.Addr() }
