package tcp

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
)

// readChunk is how much of a frame's body the reader allocates ahead of
// the bytes that arrive: a frame up to this size gets its buffer at once; a
// larger one starts with a buffer this size, which doubles each time it
// fills, so what the reader holds for a frame is never much more than what
// the peer actually sent (a 4-byte length alone costs at most readChunk).
const readChunk = 64 << 10

// conn is one framed connection. It owns two goroutines: the reader, which
// reads frames into a bounded queue for Recv, and the writer, which writes
// what a sender could not write without waiting for the socket (write.go).
// Both exit when the connection closes; Close waits for them.
type conn struct {
	nc      net.Conn
	auth    credentials.AuthInfo                  // what the credentials' handshake verified; nil without
	refused func(msg string, fields ...zap.Field) // the listener's line for a peer we close on; nil when dialled
	maxRecv int                                   // what we announced
	maxSend int                                   // what the peer announced
	grace   time.Duration
	stall   time.Duration // StallTimeout

	// Send side (write.go): a byte budget bounds what is queued or being
	// written. One goroutine at a time holds the writer's role: a sender
	// that found nobody writing, or the writer goroutine.
	sendBudget *semaphore.Weighted
	sendCap    int64
	wmu        sync.Mutex
	wqueue     []frame       // guarded by wmu: frames for the role's holder
	writing    bool          // guarded by wmu: the writer's role is held
	lastDirect uint64        // guarded by wmu: received when a sender last wrote itself
	wnotify    chan struct{} // holds a token while the role is handed to the writer goroutine
	w          writeState    // the role holder's

	// Receive side: the reader acquires budget before queueing a frame and
	// Recv gives it back.
	recvBudget *semaphore.Weighted
	recvCap    int64
	recvq      chan transport.Buffer // closed by the reader when it stops
	received   atomic.Uint64         // bytes read off the socket, hello included
	frameBytes atomic.Uint64         // capacity of the buffers the reader allocated for frames

	// Closing: sig is set once, with why the connection closed (wrapping
	// transport.ErrClosed), by a failure or by Close; local is set by Close.
	sig    signal.Signal
	local  signal.Signal
	ctx    context.Context // cancelled when sig is set, for the budget waits
	cancel context.CancelFunc
	done   <-chan struct{} // sig.Done()
	wg     sync.WaitGroup
	closed chan struct{} // closed when teardown has finished

	// Run once the socket is closed (OnClose), instead of a goroutine each
	// waiting for Done: the listener giving the connection's place back.
	onCloseMu sync.Mutex
	onClose   []func()
	tornDown  bool
}

type frame struct {
	b      []byte
	pooled bool // b came from bufpool and goes back after writing
}

// newConn starts the connection's loops on nc, whose hello exchange is
// done. refused, when not nil, logs the line the listener writes about a
// peer closed for what it sent.
func newConn(nc net.Conn, o *Options, maxSend int, auth credentials.AuthInfo, refused func(string, ...zap.Field)) *conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // latency over packet count: RPCs are small
	}
	c := &conn{
		nc:         nc,
		auth:       auth,
		refused:    refused,
		maxRecv:    o.MaxMessageSize,
		maxSend:    maxSend,
		grace:      o.CloseGrace,
		stall:      o.StallTimeout,
		sendCap:    int64(o.SendQueueBytes),
		sendBudget: semaphore.NewWeighted(int64(o.SendQueueBytes)),
		wnotify:    make(chan struct{}, 1),
		recvCap:    int64(o.RecvQueueBytes),
		recvBudget: semaphore.NewWeighted(int64(o.RecvQueueBytes)),
		recvq:      make(chan transport.Buffer, 1024),
		closed:     make(chan struct{}),
	}
	c.w.init(nc)
	c.received.Store(helloLen)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.done = c.sig.Done()
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c
}

// budget is what a message of n bytes takes from a queue budget of capacity
// cp: a message larger than the whole budget takes all of it, so it can pass
// when the queue is empty.
func budget(n int, cp int64) int64 {
	if int64(n) > cp {
		return cp
	}
	if n == 0 {
		return 1 // empty messages still occupy a queue slot
	}
	return int64(n)
}

func (c *conn) Send(ctx context.Context, msg []byte) error {
	if err := c.checkSend(ctx, len(msg)); err != nil {
		return err
	}
	if err := c.acquireSend(ctx, len(msg)); err != nil {
		return err
	}
	b := bufpool.Get(len(msg))
	copy(b, msg)
	return c.enqueue(frame{b: b, pooled: true})
}

func (c *conn) NewSendBuffer(ctx context.Context, n int) (transport.Buffer, error) {
	if err := c.checkSend(ctx, n); err != nil {
		return transport.Buffer{}, err
	}
	return transport.NewBuffer(bufpool.Get(n), pool{}, 0), nil
}

func (c *conn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	if !b.Owned(pool{}) {
		b.Release()
		return errors.New("tcp: SendBuffer takes only buffers from NewSendBuffer")
	}
	data := b.Bytes()
	if err := c.checkSend(ctx, len(data)); err != nil {
		b.Release()
		return err
	}
	if err := c.acquireSend(ctx, len(data)); err != nil {
		b.Release()
		return err
	}
	return c.enqueue(frame{b: data, pooled: true})
}

// checkSend refuses a send that cannot go: too large, a context already
// done (nothing is queued for it), or a closed connection.
func (c *conn) checkSend(ctx context.Context, n int) error {
	if n > c.maxSend {
		return fmt.Errorf("%w: %d bytes, the peer accepts at most %d", transport.ErrMessageTooLarge, n, c.maxSend)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return c.closeErr()
	default:
		return nil
	}
}

func (c *conn) acquireSend(ctx context.Context, n int) error {
	w := budget(n, c.sendCap)
	if c.sendBudget.TryAcquire(w) {
		return nil
	}
	// Wait for room, for ctx, or for the connection to close.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	if err := c.sendBudget.Acquire(ctx, w); err != nil {
		select {
		case <-c.done:
			return c.closeErr()
		default:
			return err
		}
	}
	return nil
}

func closeWrite(nc net.Conn) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// readLoop reads frames into recvq until the stream ends or fails. A frame
// announced larger than our limit is a protocol violation: the connection
// is closed without reading the frame into memory.
func (c *conn) readLoop() {
	defer c.wg.Done()
	defer close(c.recvq)
	cr := &countingReader{nc: c.nc, n: &c.received, stall: c.stall}
	r := bufio.NewReaderSize(cr, 64<<10)
	var hdr [frameHeaderLen]byte
	for {
		// The next frame may be long in coming (an idle connection); once
		// its first byte is here, the rest must keep coming.
		if r.Buffered() == 0 {
			if _, err := r.Peek(1); err != nil {
				c.readFailed(err)
				return
			}
		}
		cr.inFrame = true
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			c.readFailed(cr.why(err))
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > c.maxRecv {
			err := fmt.Errorf("%w: peer sent a %d-byte frame, over the %d-byte limit", transport.ErrProtocol, n, c.maxRecv)
			if c.refused != nil {
				c.refused("closing connection", zap.Stringer("peer", c.nc.RemoteAddr()), zap.Error(err))
			}
			c.fail(err)
			return
		}
		w := budget(n, c.recvCap)
		if err := c.recvBudget.Acquire(c.ctx, w); err != nil {
			cr.frameDone() // the grace bounds the rest
			c.discard(r)
			return
		}
		b, err := c.readBody(r, n)
		if err != nil {
			c.recvBudget.Release(w)
			c.readFailed(cr.why(err))
			return
		}
		cr.frameDone()
		select {
		case c.recvq <- transport.NewBuffer(b, recvOwner{c}, uint64(w)):
		case <-c.done:
			bufpool.Put(b)
			c.recvBudget.Release(w)
			c.discard(r)
			return
		}
	}
}

// readBody reads a frame body of n bytes, allocating as it arrives (see
// readChunk). On error nothing is kept.
func (c *conn) readBody(r io.Reader, n int) ([]byte, error) {
	b := bufpool.Get(min(n, readChunk))
	c.frameBytes.Add(uint64(cap(b)))
	got := 0
	for {
		if _, err := io.ReadFull(r, b[got:]); err != nil {
			bufpool.Put(b)
			return nil, err
		}
		got = len(b)
		if got == n {
			return b, nil
		}
		// Full, and more is announced: double it, up to n.
		nb := bufpool.Get(min(2*got, n))
		c.frameBytes.Add(uint64(cap(nb)))
		copy(nb, b)
		bufpool.Put(b)
		b = nb
	}
}

// countingReader is the socket as the reader goroutine reads it: it counts
// the bytes read, for BytesReceived, and while a frame is in progress it
// gives each read the stall timeout, so a peer that stops in the middle of
// a frame fails the read. Only the reader goroutine touches it.
type countingReader struct {
	nc       net.Conn
	n        *atomic.Uint64
	stall    time.Duration
	inFrame  bool // a frame has started and is not yet whole
	deadline bool // the socket has a read deadline
}

func (cr *countingReader) Read(p []byte) (int, error) {
	if cr.inFrame {
		_ = cr.nc.SetReadDeadline(time.Now().Add(cr.stall))
		cr.deadline = true
	}
	n, err := cr.nc.Read(p)
	cr.n.Add(uint64(n))
	return n, err
}

// frameDone: the frame is whole; the wait for the next one has no bound.
func (cr *countingReader) frameDone() {
	cr.inFrame = false
	if cr.deadline {
		_ = cr.nc.SetReadDeadline(time.Time{})
		cr.deadline = false
	}
}

// why names a read that timed out in the middle of a frame.
func (cr *countingReader) why(err error) error {
	if cr.inFrame && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the peer stopped in the middle of a message (no byte for %v)", transport.ErrProtocol, cr.stall)
	}
	return err
}

// readFailed records why reading stopped. Once the connection is closing,
// read errors are the expected consequence and say nothing new.
func (c *conn) readFailed(err error) {
	switch {
	case errors.Is(err, transport.ErrProtocol):
		if c.refused != nil {
			c.refused("closing connection", zap.Stringer("peer", c.nc.RemoteAddr()), zap.Error(err))
		}
		c.fail(err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		c.fail(errors.New("tcp: connection closed by peer"))
	default:
		c.fail(fmt.Errorf("tcp: read: %w", err))
	}
}

// discard reads and drops what the peer still sends after we started
// closing, until it ends its side or the grace period passes. Closing a TCP
// socket with unread data makes the kernel send a reset, which can destroy
// the last messages we sent before the peer reads them.
func (c *conn) discard(r io.Reader) {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.grace))
	_, _ = io.Copy(io.Discard, r)
}

// fail starts closing the connection with err (wrapped in ErrClosed).
func (c *conn) fail(err error) { c.shut(transport.Closed(err), false) }

// shut starts closing the connection with err, unless it already is; local
// says Close called it. local is set after sig, so a Recv it wakes finds
// the reason, and before teardown starts, so teardown sees it.
func (c *conn) shut(err error, local bool) {
	won := c.sig.Set(err)
	if local {
		c.local.Set(nil)
	}
	if won {
		c.cancel()
		go c.teardown()
	}
}

// teardown waits for both loops (the writer flushes, the reader drains to
// the peer's end of stream or the grace period), then closes the socket.
func (c *conn) teardown() {
	defer close(c.closed)
	// The loops may be blocked on a peer that neither reads nor ends its
	// stream; bound their wait.
	t := time.AfterFunc(c.grace, func() { _ = c.nc.SetDeadline(time.Now()) })
	c.wg.Wait()
	t.Stop()
	_ = c.nc.Close()
	c.onCloseMu.Lock()
	c.tornDown = true
	fns := c.onClose
	c.onClose = nil
	c.onCloseMu.Unlock()
	for _, f := range fns {
		f()
	}
	// Messages queued for Recv after a local Close are dropped.
	if c.local.IsSet() {
		for b := range c.recvq {
			b.Release()
		}
	}
}

// OnClose runs f once the connection's socket is closed (at once if it is
// already): what the listener's connection limit uses to give a place
// back without a goroutine per connection.
func (c *conn) OnClose(f func()) {
	c.onCloseMu.Lock()
	if c.tornDown {
		c.onCloseMu.Unlock()
		f()
		return
	}
	c.onClose = append(c.onClose, f)
	c.onCloseMu.Unlock()
}

// closeErr is why the connection closed; it wraps transport.ErrClosed.
func (c *conn) closeErr() error { return c.sig.Err() }

func (c *conn) Recv(ctx context.Context) (transport.Buffer, error) {
	select {
	case <-c.local.Done():
		return transport.Buffer{}, c.closeErr()
	default:
	}
	select {
	case b, ok := <-c.recvq:
		if !ok {
			return transport.Buffer{}, c.closeErr()
		}
		return b, nil
	case <-c.local.Done():
		return transport.Buffer{}, c.closeErr()
	case <-ctx.Done():
		return transport.Buffer{}, ctx.Err()
	}
}

// Close closes the connection and waits until its goroutines have exited.
func (c *conn) Close() error {
	c.shut(fmt.Errorf("%w: closed locally", transport.ErrClosed), true)
	<-c.closed
	return nil
}

// BytesReceived implements transport.Activity: the bytes read off the
// socket so far, the hello and frames still arriving included.
func (c *conn) BytesReceived() uint64 { return c.received.Load() }

// AuthInfo is what the connection's credentials verified (nil without
// any); it implements transport.Secured.
func (c *conn) AuthInfo() credentials.AuthInfo { return c.auth }

func (c *conn) Done() <-chan struct{} { return c.done }
func (c *conn) MaxMessageSize() int   { return c.maxSend }
func (c *conn) LocalAddr() net.Addr   { return c.nc.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr  { return c.nc.RemoteAddr() }

// recvOwner takes back received frames: the memory goes to the pool and the
// queue budget to the reader.
type recvOwner struct{ c *conn }

func (o recvOwner) ReleaseBuffer(w uint64, b []byte) {
	bufpool.Put(b)
	o.c.recvBudget.Release(int64(w))
}

// pool owns send buffers handed out by NewSendBuffer.
type pool struct{}

func (pool) ReleaseBuffer(_ uint64, b []byte) { bufpool.Put(b) }
