package accept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Handshake turns an accepted socket into a connection, or fails; ctx ends
// when the listener closes. On failure the socket is closed for it.
type Handshake func(ctx context.Context, nc net.Conn) (transport.Conn, error)

// Options configure a Listener. The zero value is usable.
type Options struct {
	// Log receives the listener's lines; default a no-op Log.
	Log *Log
	// OnClose, when not nil, runs once the listener has closed and its
	// goroutines have exited.
	OnClose func()
	// MaxConns bounds the sockets accepted and not yet closed (those in
	// their handshake included); 0 means no bound. Beyond it a new socket
	// is accepted and closed at once, with a (rate-limited) line: the peer
	// learns right away instead of waiting in the kernel's backlog until
	// its own deadline, and the backlog never fills with connections that
	// nobody will serve.
	MaxConns int
}

// Backoff after a temporary accept error: 5 ms, doubling to 1 s, as
// net/http's Server does; reset by the next successful accept.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
)

// Listener is a transport.Listener over a net.Listener.
type Listener struct {
	nl        net.Listener
	handshake Handshake
	o         Options
	log       *Log
	conns     atomic.Int64 // sockets accepted whose connection has not ended

	ctx    context.Context // ends when the listener closes; handshakes run under it
	cancel context.CancelFunc
	closed signal.Signal // why Accept fails: closed, or a permanent accept error
	ready  chan transport.Conn
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts accepting on nl, logging to log. onClose, when not nil, runs
// once the listener has closed and its goroutines have exited.
func New(nl net.Listener, handshake Handshake, log *zap.Logger, onClose func()) *Listener {
	return NewWithOptions(nl, handshake, Options{Log: NewLog(log, ""), OnClose: onClose})
}

// NewWithOptions starts accepting on nl.
func NewWithOptions(nl net.Listener, handshake Handshake, o Options) *Listener {
	if o.Log == nil {
		o.Log = NewLog(nil, "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{nl: nl, handshake: handshake, o: o, log: o.Log, ctx: ctx, cancel: cancel, ready: make(chan transport.Conn)}
	l.wg.Add(1)
	go l.loop()
	return l
}

// SetLogger makes log receive the listener's lines from now on: refused
// peers, temporary accept errors, sockets over the connection limit. It
// implements transport.Logged.
func (l *Listener) SetLogger(log *zap.Logger) { l.log.Set(log) }

func (l *Listener) loop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.nl.Accept()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			if !Temporary(err) {
				// Accept returns it: whoever serves the listener says so.
				l.stop(fmt.Errorf("%w: accept: %w", transport.ErrClosed, err))
				return
			}
			delay = nextBackoff(delay)
			l.log.acceptFailed("accept failed; retrying", zap.Error(err), zap.Duration("retry_in", delay))
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		if max := l.o.MaxConns; max > 0 && l.conns.Load() >= int64(max) {
			l.log.Refused("refused connection: at the connection limit",
				zap.Stringer("peer", nc.RemoteAddr()), zap.Int("max_connections", max))
			nc.Close()
			continue
		}
		l.conns.Add(1)
		l.wg.Add(1)
		go l.serve(nc)
	}
}

// serve handshakes one socket and hands the connection to Accept. With a
// connection limit, it then stays to give the connection's place back when
// the connection ends, outside the listener's WaitGroup: accepted
// connections outlive the listener, and Close does not wait for them.
func (l *Listener) serve(nc net.Conn) {
	c, err := l.handshake(l.ctx, nc)
	if err != nil {
		if l.ctx.Err() == nil {
			l.log.Refused("refused connection", zap.Stringer("peer", nc.RemoteAddr()), zap.Error(err))
		}
		nc.Close()
		l.conns.Add(-1)
		l.wg.Done()
		return
	}
	select {
	case l.ready <- c:
	case <-l.ctx.Done():
		c.Close()
	}
	l.wg.Done()
	if l.o.MaxConns <= 0 {
		l.conns.Add(-1)
		return
	}
	if n, ok := c.(closeNotifier); ok {
		n.OnClose(func() { l.conns.Add(-1) })
		return
	}
	<-c.Done()
	l.conns.Add(-1)
}

// closeNotifier is a connection that runs a function once it has closed
// (transport/tcp's): with a connection limit, the listener gives the
// place back from there instead of keeping a goroutine per connection.
type closeNotifier interface{ OnClose(func()) }

// Temporary reports whether an accept error is worth retrying: the process
// or the system is out of descriptors or memory, a peer gave up before its
// connection was accepted, or the error says it is temporary.
func Temporary(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return minBackoff
	}
	return min(2*d, maxBackoff)
}

// stop ends the listener with err, which Accept returns from then on.
func (l *Listener) stop(err error) {
	l.closed.Set(err)
	l.cancel()
}

// Accept waits for the next handshaken connection.
func (l *Listener) Accept(ctx context.Context) (transport.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.closed.Done():
		return nil, l.closed.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting, abandons handshakes in progress, and waits for
// the listener's goroutines.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.stop(fmt.Errorf("%w: listener closed", transport.ErrClosed))
		err = l.nl.Close()
		l.wg.Wait()
		if l.o.OnClose != nil {
			l.o.OnClose()
		}
	})
	return err
}

// Addr is the address listened on.
func (l *Listener) Addr() net.Addr { return l.nl.Addr() }
