package pipe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
)

func init() { transport.Register("pipe", Default) }

// Default is the transport registered for the "pipe" scheme.
var Default = New(Options{})

// Options configure a pipe transport. The zero value is usable.
type Options struct {
	// MaxMessageSize is the largest message either end accepts. Default
	// transport.DefaultMaxMessageSize.
	MaxMessageSize int
	// MaxBuffered bounds the bytes queued in one direction that the
	// receiver has not taken; Send blocks beyond it. A message larger than
	// the bound is taken when nothing else is queued. Default 256 KiB.
	MaxBuffered int
}

// Transport is a namespace of in-memory listeners.
type Transport struct {
	o Options

	mu        sync.Mutex
	listeners map[string]*Listener
	next      int // for names ending in ":0"
}

// New returns a pipe transport with its own namespace of names.
func New(o Options) *Transport {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = transport.DefaultMaxMessageSize
	}
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = 256 << 10
	}
	return &Transport{o: o, listeners: make(map[string]*Listener)}
}

// Listen listens on name. A name ending in ":0" gets a fresh number in
// place of the 0, as a port would, so tests can listen many times.
func (t *Transport) Listen(name string) (transport.Listener, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if base, ok := strings.CutSuffix(name, ":0"); ok {
		t.next++
		name = base + ":" + strconv.Itoa(t.next)
	}
	if _, busy := t.listeners[name]; busy {
		return nil, fmt.Errorf("pipe: %q is already in use", name)
	}
	l := &Listener{t: t, addr: Addr(name), backlog: make(chan *Conn)}
	t.listeners[name] = l
	return l, nil
}

// Dial connects to the listener on name; it waits for the listener to
// accept, honouring ctx.
func (t *Transport) Dial(ctx context.Context, name string) (transport.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	l := t.listeners[name]
	t.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("pipe: nothing listens on %q: %w", name, transport.Closed(errors.New("connection refused")))
	}
	id := l.dials.Add(1)
	client, server := newPair(t.o, Addr(fmt.Sprintf("%s#%d", name, id)), l.addr)
	select {
	case l.backlog <- server:
		return client, nil
	case <-l.closed.Done():
		return nil, fmt.Errorf("pipe: listener %q closed: %w", name, transport.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Addr is a pipe address: the name listened on, or for a dialled end that
// name followed by "#n".
type Addr string

func (Addr) Network() string  { return "pipe" }
func (a Addr) String() string { return string(a) }

// Listener accepts the connections dialled to its name.
type Listener struct {
	t       *Transport
	addr    Addr
	backlog chan *Conn
	dials   atomic.Uint64
	closed  signal.Signal
}

// Accept returns the next connection dialled to the listener.
func (l *Listener) Accept(ctx context.Context) (transport.Conn, error) {
	select {
	case c := <-l.backlog:
		return c, nil
	case <-l.closed.Done():
		return nil, fmt.Errorf("pipe: listener %q: %w", l.addr, transport.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening and frees the name.
func (l *Listener) Close() error {
	if l.closed.Set(transport.ErrClosed) {
		l.t.mu.Lock()
		delete(l.t.listeners, string(l.addr))
		l.t.mu.Unlock()
	}
	return nil
}

// Addr returns the name listened on.
func (l *Listener) Addr() net.Addr { return l.addr }
