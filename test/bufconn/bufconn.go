package bufconn

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// ErrClosed is what Accept and Dial return once the listener is closed.
var ErrClosed = errors.New("bufconn: listener closed")

// Listener is an in-memory net.Listener.
type Listener struct {
	size   int
	conns  chan net.Conn
	done   chan struct{}
	closer sync.Once
}

// Listen returns a listener whose connections buffer up to size bytes in
// each direction; a write beyond it waits for the reader.
func Listen(size int) *Listener {
	return &Listener{size: max(size, 1), conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	}
}

// Close stops the listener; connections already made stay open.
func (l *Listener) Close() error {
	l.closer.Do(func() { close(l.done) })
	return nil
}

// Addr is "bufconn".
func (l *Listener) Addr() net.Addr { return addr{} }

// Dial connects to the listener, waiting for it to Accept.
func (l *Listener) Dial() (net.Conn, error) { return l.DialContext(context.Background()) }

// DialContext connects to the listener, waiting for it to Accept until ctx
// ends.
func (l *Listener) DialContext(ctx context.Context) (net.Conn, error) {
	a, b := newBuffer(l.size), newBuffer(l.size)
	client := &conn{in: a, out: b, rd: newDeadline(), wd: newDeadline()}
	server := &conn{in: b, out: a, rd: newDeadline(), wd: newDeadline()}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type addr struct{}

func (addr) Network() string { return "bufconn" }
func (addr) String() string  { return "bufconn" }

// buffer is one direction of a connection: bytes written and not yet read.
type buffer struct {
	mu      sync.Mutex
	data    []byte
	size    int
	wclosed bool          // the writer closed: the reader gets EOF after data
	rclosed bool          // the reader closed: writes fail
	changed chan struct{} // closed and replaced at every change
}

func newBuffer(size int) *buffer { return &buffer{size: size, changed: make(chan struct{})} }

// notify wakes the waiters; called with b.mu held.
func (b *buffer) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *buffer) read(p []byte, dl *deadline) (int, error) {
	for {
		b.mu.Lock()
		switch {
		case b.rclosed:
			b.mu.Unlock()
			return 0, net.ErrClosed
		case len(b.data) > 0:
			n := copy(p, b.data)
			b.data = b.data[n:]
			if len(b.data) == 0 {
				b.data = nil // let the backing array go
			}
			b.notify()
			b.mu.Unlock()
			return n, nil
		case b.wclosed:
			b.mu.Unlock()
			return 0, io.EOF
		}
		wait := b.changed
		b.mu.Unlock()
		select {
		case <-wait:
		case <-dl.wait():
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (b *buffer) write(p []byte, dl *deadline) (int, error) {
	written := 0
	for {
		b.mu.Lock()
		switch {
		case b.wclosed:
			b.mu.Unlock()
			return written, net.ErrClosed
		case b.rclosed:
			b.mu.Unlock()
			return written, io.ErrClosedPipe
		case written == len(p):
			b.mu.Unlock()
			return written, nil
		}
		if room := b.size - len(b.data); room > 0 {
			n := min(room, len(p)-written)
			b.data = append(b.data, p[written:written+n]...)
			written += n
			b.notify()
			b.mu.Unlock()
			continue
		}
		wait := b.changed
		b.mu.Unlock()
		select {
		case <-wait:
		case <-dl.wait():
			return written, os.ErrDeadlineExceeded
		}
	}
}

// conn is one end of a connection.
type conn struct {
	in, out *buffer
	rd, wd  *deadline
}

func (c *conn) Read(p []byte) (int, error)  { return c.in.read(p, c.rd) }
func (c *conn) Write(p []byte) (int, error) { return c.out.write(p, c.wd) }

// Close ends both directions: the peer reads EOF after what was written,
// and its writes fail.
func (c *conn) Close() error {
	c.out.mu.Lock()
	c.out.wclosed = true
	c.out.notify()
	c.out.mu.Unlock()
	c.in.mu.Lock()
	c.in.rclosed = true
	c.in.notify()
	c.in.mu.Unlock()
	return nil
}

// CloseWrite ends this end's writing: the peer reads EOF after what was
// written. Reading goes on.
func (c *conn) CloseWrite() error {
	c.out.mu.Lock()
	c.out.wclosed = true
	c.out.notify()
	c.out.mu.Unlock()
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return addr{} }
func (c *conn) RemoteAddr() net.Addr { return addr{} }

func (c *conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}
func (c *conn) SetReadDeadline(t time.Time) error  { c.rd.set(t); return nil }
func (c *conn) SetWriteDeadline(t time.Time) error { c.wd.set(t); return nil }

// deadline is a channel closed when a deadline passes.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	gen   uint64        // which set the timer belongs to
	ch    chan struct{} // closed when the current deadline has passed
}

func newDeadline() *deadline { return &deadline{ch: make(chan struct{})} }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.gen++
	select {
	case <-d.ch:
		d.ch = make(chan struct{}) // the last one passed: start afresh
	default:
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		close(d.ch)
		return
	}
	gen, ch := d.gen, d.ch
	d.timer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		if d.gen == gen { // not replaced by a later set meanwhile
			close(ch)
		}
		d.mu.Unlock()
	})
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}
