package pipe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
)

var (
	errLocalClose = transport.Closed(errors.New("pipe: closed locally"))
	errPeerClose  = transport.Closed(errors.New("pipe: closed by the peer"))
)

// queue is one direction of a pipe: the messages sent and not yet received.
type queue struct {
	max int // bytes

	mu      sync.Mutex
	msgs    [][]byte
	bytes   int
	stalled bool
	changed chan struct{} // closed and replaced at every change
	arrival func()        // the receiving end's OnArrival
}

func newQueue(max int) *queue { return &queue{max: max, changed: make(chan struct{})} }

// notify wakes every waiter; called with q.mu held.
func (q *queue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// arrived calls the receiving end's OnArrival callback: a message came, or
// the pipe closed. Called with q.mu held.
func (q *queue) arrived() {
	if f := q.arrival; f != nil {
		q.arrival = nil
		f()
	}
}

// Conn is one end of an in-memory connection.
type Conn struct {
	in, out       *queue
	local, remote Addr
	max           int
	received      atomic.Uint64
	peer          *Conn
	localClosed   atomic.Bool
	closed        *signal.Signal // shared by both ends: set by the first Close
}

func newPair(o Options, clientAddr, serverAddr Addr) (client, server *Conn) {
	ab, ba := newQueue(o.MaxBuffered), newQueue(o.MaxBuffered)
	closed := new(signal.Signal)
	client = &Conn{in: ba, out: ab, local: clientAddr, remote: serverAddr, max: o.MaxMessageSize, closed: closed}
	server = &Conn{in: ab, out: ba, local: serverAddr, remote: clientAddr, max: o.MaxMessageSize, closed: closed}
	client.peer, server.peer = server, client
	return client, server
}

// closeErr is why the connection is closed, as this end reports it.
func (c *Conn) closeErr() error {
	if c.localClosed.Load() {
		return errLocalClose
	}
	return errPeerClose
}

// Send queues a copy of msg for the peer, waiting while the peer has
// MaxBuffered bytes it has not taken.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	if err := c.check(ctx, len(msg)); err != nil {
		return err
	}
	return c.enqueue(ctx, append([]byte(nil), msg...))
}

// NewSendBuffer returns n bytes of heap memory to fill and pass to
// SendBuffer.
func (c *Conn) NewSendBuffer(ctx context.Context, n int) (transport.Buffer, error) {
	if err := c.check(ctx, n); err != nil {
		return transport.Buffer{}, err
	}
	return transport.NewBuffer(make([]byte, n), nil, 0), nil
}

// SendBuffer queues b's bytes for the peer without copying them.
func (c *Conn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	msg := b.Bytes()
	if err := c.check(ctx, len(msg)); err != nil {
		return err
	}
	return c.enqueue(ctx, msg)
}

func (c *Conn) check(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.closed.IsSet() {
		return c.closeErr()
	}
	if n > c.max {
		return fmt.Errorf("%w: %d bytes, the peer accepts %d", transport.ErrMessageTooLarge, n, c.max)
	}
	return nil
}

func (c *Conn) enqueue(ctx context.Context, msg []byte) error {
	q := c.out
	for {
		q.mu.Lock()
		if c.closed.IsSet() {
			q.mu.Unlock()
			return c.closeErr()
		}
		if q.bytes == 0 || q.bytes+len(msg) <= q.max {
			q.msgs = append(q.msgs, msg)
			q.bytes += len(msg)
			c.peer.received.Add(uint64(len(msg)))
			q.notify()
			q.arrived()
			q.mu.Unlock()
			return nil
		}
		wait := q.changed
		q.mu.Unlock()
		select {
		case <-wait:
		case <-c.closed.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Recv returns the next message; after the peer closed, the messages it
// sent before are returned first.
func (c *Conn) Recv(ctx context.Context) (transport.Buffer, error) {
	q := c.in
	for {
		if err := ctx.Err(); err != nil {
			return transport.Buffer{}, err
		}
		q.mu.Lock()
		if c.localClosed.Load() {
			q.mu.Unlock()
			return transport.Buffer{}, errLocalClose
		}
		if len(q.msgs) > 0 && !q.stalled {
			msg := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			q.bytes -= len(msg)
			q.notify()
			q.mu.Unlock()
			return transport.NewBuffer(msg, nil, 0), nil
		}
		if len(q.msgs) == 0 && c.closed.IsSet() {
			q.mu.Unlock()
			return transport.Buffer{}, c.closeErr()
		}
		wait := q.changed
		q.mu.Unlock()
		select {
		case <-wait:
		case <-c.closed.Done():
		case <-ctx.Done():
		}
	}
}

// Stall makes Recv on this end wait, as if the application stopped
// reading, until Stall(false); messages still arrive (and count in
// BytesReceived) until MaxBuffered bytes are queued, then the peer's Send
// blocks.
func (c *Conn) Stall(on bool) {
	q := c.in
	q.mu.Lock()
	q.stalled = on
	q.notify()
	q.mu.Unlock()
}

// Buffered returns the bytes queued for this end's Recv.
func (c *Conn) Buffered() int {
	q := c.in
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// BytesReceived counts the bytes that have arrived for this end (taken or
// not); it implements transport.Activity.
func (c *Conn) BytesReceived() uint64 { return c.received.Load() }

// Close closes both ends: this end's queued messages are dropped, the
// peer still receives what was sent to it before.
func (c *Conn) Close() error {
	q := c.in
	q.mu.Lock()
	if !c.localClosed.Swap(true) {
		q.msgs, q.bytes = nil, 0
		q.notify()
	}
	q.mu.Unlock()
	c.closed.Set(transport.ErrClosed)
	for _, q := range []*queue{c.in, c.out} { // both ends' readers
		q.mu.Lock()
		q.arrived()
		q.mu.Unlock()
	}
	return nil
}

// OnArrival implements transport.Arrivals.
func (c *Conn) OnArrival(f func()) bool {
	q := c.in
	q.mu.Lock()
	defer q.mu.Unlock()
	if f != nil && (len(q.msgs) > 0 || c.closed.IsSet()) {
		q.arrival = nil
		return false
	}
	q.arrival = f
	return true
}

// Done is closed once either end has closed.
func (c *Conn) Done() <-chan struct{} { return c.closed.Done() }

// MaxMessageSize is the largest message Send takes.
func (c *Conn) MaxMessageSize() int { return c.max }

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

var (
	_ transport.Conn     = (*Conn)(nil)
	_ transport.Activity = (*Conn)(nil)
	_ transport.Arrivals = (*Conn)(nil)
)
