package credentials

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/signal"
)

// ListenerOptions configure NewListener. The zero value is sensible.
type ListenerOptions struct {
	// HandshakeTimeout bounds each handshake. Default 10 s.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the connections being handshaken or waiting
	// for Accept; beyond it, the listener stops accepting until one is
	// done (the kernel's backlog holds the rest). Default 64.
	MaxHandshakes int
	// Logger logs refused handshakes, with the reason. Default zap.NewNop().
	Logger *zap.Logger
}

// Conn is a connection a Listener accepted and secured.
type Conn struct {
	net.Conn
	// AuthInfo is what the handshake learned about the client.
	AuthInfo AuthInfo
}

// AuthInfoFromConn returns the AuthInfo of a connection from a Listener.
func AuthInfoFromConn(c net.Conn) (AuthInfo, bool) {
	sc, ok := c.(*Conn)
	if !ok {
		return nil, false
	}
	return sc.AuthInfo, true
}

// Listener is a net.Listener whose connections have passed ServerHandshake.
// Each handshake runs in a goroutine of its own, bounded in time and in
// number, so a client that is slow, speaks plaintext, or shows a wrong
// certificate delays no other: it is logged and dropped, and the listener
// keeps serving.
type Listener struct {
	lis   net.Listener
	creds TransportCredentials
	o     ListenerOptions

	closed signal.Signal // set by Close, or by the inner listener failing
	ready  chan *Conn
	slots  chan struct{} // one per connection between accept and Accept
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{} // raw connections in a handshake
}

// NewListener secures the connections of lis with creds. Close closes lis.
func NewListener(lis net.Listener, creds TransportCredentials, o ListenerOptions) *Listener {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.MaxHandshakes <= 0 {
		o.MaxHandshakes = 64
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	l := &Listener{
		lis: lis, creds: creds, o: o,
		ready:   make(chan *Conn),
		slots:   make(chan struct{}, o.MaxHandshakes),
		pending: make(map[net.Conn]struct{}),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next secured connection, a *Conn.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.closed.Done():
		return nil, l.closed.Err()
	}
}

// Addr is the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.lis.Addr() }

// Close stops accepting, closes the connections not yet returned by Accept,
// and waits for the listener's goroutines.
func (l *Listener) Close() error {
	l.closed.Set(net.ErrClosed)
	err := l.lis.Close()
	l.mu.Lock()
	for c := range l.pending {
		c.Close() // ends its handshake now
	}
	l.mu.Unlock()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil // the inner listener had failed and closed already
	}
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var pause time.Duration
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.closed.Done():
			return
		}
		raw, err := l.lis.Accept()
		if err != nil {
			<-l.slots
			if wait, ok := retryAccept(err, pause); ok {
				pause = wait
				l.o.Logger.Warn("accept failed; retrying", zap.Duration("in", wait), zap.Error(err))
				select {
				case <-time.After(wait):
					continue
				case <-l.closed.Done():
					return
				}
			}
			l.closed.Set(err)
			return
		}
		pause = 0
		if !l.track(raw) {
			raw.Close()
			<-l.slots
			return
		}
		l.wg.Add(1)
		go l.handshake(raw)
	}
}

// retryAccept says whether an Accept error is one to wait out (out of file
// descriptors, a connection reset before it was accepted), as net/http
// does, and how long to wait: 5 ms, doubling up to 1 s.
func retryAccept(err error, last time.Duration) (time.Duration, bool) {
	var ne net.Error
	if !(errors.As(err, &ne) && ne.Timeout()) &&
		!errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) &&
		!errors.Is(err, syscall.ECONNABORTED) && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ENOMEM) {
		return 0, false
	}
	return min(max(2*last, 5*time.Millisecond), time.Second), true
}

// track adds raw to the connections Close must close, unless closed.
func (l *Listener) track(raw net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.IsSet() {
		return false
	}
	l.pending[raw] = struct{}{}
	return true
}

func (l *Listener) untrack(raw net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, raw)
}

// handshake secures raw and hands it to Accept, or drops it.
func (l *Listener) handshake(raw net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.slots }()
	_ = raw.SetDeadline(time.Now().Add(l.o.HandshakeTimeout))
	conn, info, err := l.creds.ServerHandshake(raw)
	l.untrack(raw)
	if err != nil {
		// ServerHandshake closed raw. Not logged: a handshake Close cut.
		if !(l.closed.IsSet() && errors.Is(err, net.ErrClosed)) {
			l.o.Logger.Warn("refused a connection: handshake failed", zap.Stringer("remote", raw.RemoteAddr()), zap.Error(err))
		}
		return
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return
	}
	select {
	case l.ready <- &Conn{Conn: conn, AuthInfo: info}:
	case <-l.closed.Done():
		conn.Close()
	}
}
