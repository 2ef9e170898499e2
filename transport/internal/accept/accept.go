package accept

import (
	"context"
	"fmt"
	"net"
	"sync"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
)

// Handshake turns an accepted socket into a connection, or fails; ctx ends
// when the listener closes. On failure the socket is closed for it.
type Handshake func(ctx context.Context, nc net.Conn) (transport.Conn, error)

// Listener is a transport.Listener over a net.Listener.
type Listener struct {
	nl        net.Listener
	handshake Handshake
	log       *zap.Logger
	onClose   func()

	ctx    context.Context
	cancel context.CancelFunc
	ready  chan transport.Conn
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts accepting on nl. onClose, when not nil, runs once the
// listener has closed and its goroutines have exited.
func New(nl net.Listener, handshake Handshake, log *zap.Logger, onClose func()) *Listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{nl: nl, handshake: handshake, log: log, onClose: onClose, ctx: ctx, cancel: cancel, ready: make(chan transport.Conn)}
	l.wg.Add(1)
	go l.loop()
	return l
}

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		nc, err := l.nl.Accept()
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Error("accept failed; listener stops", zap.Error(err))
				l.cancel()
			}
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c, err := l.handshake(l.ctx, nc)
			if err != nil {
				if l.ctx.Err() == nil {
					l.log.Warn("refused connection", zap.Stringer("peer", nc.RemoteAddr()), zap.Error(err))
				}
				nc.Close()
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

// Accept waits for the next handshaken connection.
func (l *Listener) Accept(ctx context.Context) (transport.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		return nil, fmt.Errorf("%w: listener closed", transport.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting, abandons handshakes in progress, and waits for
// the listener's goroutines.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.nl.Close()
		l.wg.Wait()
		if l.onClose != nil {
			l.onClose()
		}
	})
	return err
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.nl.Addr() }
