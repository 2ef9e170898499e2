package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
// larger one starts with a buffer this size, which grows fourfold each time
// it fills, so what the reader holds for a frame is never much more than
// what the peer actually sent (a 4-byte length alone costs at most
// readChunk). It is 128 KiB so that a 64 KiB message and its RPC header,
// the common large message, are read into one buffer without a copy: at 64
// KiB the header's few bytes more took a second, 128 KiB buffer and a copy
// of the first 64 KiB into it.
const readChunk = 128 << 10

// conn is one framed connection. It owns two goroutines: the reader, which
// reads frames into a bounded queue for Recv when no Recv reads the socket
// itself (read.go), and the writer, which writes what a sender could not
// write without waiting for the socket (write.go). Both exit when the
// connection closes; Close waits for them.
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
	vecCopied  atomic.Uint64 // bytes of SendVec frames copied because they had to wait (tests)
	w          writeState    // the role holder's

	// Receive side (read.go): the read role's holder acquires budget
	// before reading a frame's body, and the frame's Release gives it back.
	recvBudget  *semaphore.Weighted
	recvCap     int64
	recvq       chan transport.Buffer // frames the reader goroutine read; closed when it stops
	rs          rstate                // the frame being read: the role holder's
	direct      bool                  // Recvs may read the socket themselves
	sock        *inq                  // the socket's unread bytes, for readAhead; nil: not a socket
	rmu         sync.Mutex
	holder      holder          // guarded by rmu: who holds the read role
	qwaiters    int             // guarded by rmu: Recvs waiting on recvq
	loopWanted  bool            // guarded by rmu: the reader goroutine should take the free role
	idleRead    bool            // guarded by rmu: the reader goroutine waits in read() for a frame's first byte
	want        bool            // guarded by rmu: a Recv interrupted the reader goroutine for the role
	large       atomic.Bool     // the last frame read was over directMax and another was coming: the reader goroutine reads ahead
	readBehind  atomic.Bool     // a Recv let go of the role with bytes of the next frame read already (OnArrival)
	intr        bool            // guarded by rmu: the holder's reads are interrupted
	deadline    bool            // guarded by rmu: the socket may have a read deadline
	stallAt     time.Time       // guarded by rmu: the stall deadline set, if that is the one
	stallArms   uint64          // guarded by rmu: stall deadlines set (the tests look)
	intrs       uint64          // guarded by rmu: interruptions (the tests look)
	rfailed     bool            // guarded by rmu: the stream failed; nothing is left to drain
	releases    uint64          // guarded by rmu: roles released by Recvs
	idleSeen    uint64          // guarded by rmu: releases when the idle timer was armed
	idleArmed   bool            // guarded by rmu
	watchCtx    context.Context // guarded by rmu: the ctx whose end interrupts (watchLocked)
	watchStop   func() bool     // guarded by rmu
	idle        *time.Timer     // the reader goroutine's: has the role stayed free for idleRead? (idleFiredLocked)
	lwake       chan struct{}   // capacity 1: the reader goroutine should look at the role
	rfree       chan struct{}   // capacity 1: the reader goroutine handed the role to the Recv that wanted it
	interruptFn func()          // c.interrupt, bound once
	stopClose   func() bool     // stops the interrupt for the connection's closing
	amu         sync.Mutex
	arrival     func()        // guarded by amu: OnArrival's callback
	ended       bool          // guarded by amu: the connection ended; OnArrival reports false
	received    atomic.Uint64 // bytes read off the socket, hello included
	frameBytes  atomic.Uint64 // capacity of the buffers the reader allocated for frames

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
	vec    [][]byte // SendVec's parts, while their sender writes them itself (b is nil then)
	n      int      // the frame's length (b may hold only what is left of it)
	pooled bool     // b came from bufpool and goes back after writing
}

// pooledFrame is a frame of b, from bufpool.
func pooledFrame(b []byte) frame { return frame{b: b, n: len(b), pooled: true} }

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
		direct:     directReads(nc),
		lwake:      make(chan struct{}, 1),
		rfree:      make(chan struct{}, 1),
		closed:     make(chan struct{}),
	}
	c.w.init(nc)
	c.sock = newInq(c.w.d)
	c.received.Store(helloLen)
	c.rs.r = bufio.NewReaderSize(socketReader{c}, 64<<10)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.done = c.sig.Done()
	c.interruptFn = c.interrupt
	c.stopClose = context.AfterFunc(c.ctx, c.interruptFn)
	c.idle = time.NewTimer(time.Hour) // the reader goroutine receives its fires
	c.idle.Stop()
	c.loopWanted = true // the reader goroutine reads until a Recv comes
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
	return c.enqueue(pooledFrame(b))
}

// TrySend is Send when the send queue has room for msg now
// (transport.TrySender).
func (c *conn) TrySend(msg []byte) (bool, error) {
	if err := c.checkSend(context.Background(), len(msg)); err != nil {
		return false, err
	}
	if !c.sendBudget.TryAcquire(budget(len(msg), c.sendCap)) {
		return false, nil
	}
	b := bufpool.Get(len(msg))
	copy(b, msg)
	err := c.enqueue(pooledFrame(b))
	return err == nil, err
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
	return c.enqueue(pooledFrame(data))
}

// SendVec sends the concatenation of bufs as one message
// (transport.VectorSender). A sender that can write the frame itself, at
// once, writes it from bufs; what has to wait for another writer or for
// the socket is copied into pooled memory before SendVec returns
// (write.go), so nothing refers to bufs afterwards.
func (c *conn) SendVec(ctx context.Context, bufs [][]byte) error {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if err := c.checkSend(ctx, n); err != nil {
		return err
	}
	if err := c.acquireSend(ctx, n); err != nil {
		return err
	}
	return c.enqueueVec(bufs, n)
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
// Only the read role's holder calls it, last.
func (c *conn) discard() {
	_, _ = c.rs.r.Discard(c.rs.r.Buffered())
	_ = c.nc.SetReadDeadline(time.Now().Add(c.grace))
	_, _ = io.Copy(io.Discard, c.nc)
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
	c.idle.Stop()
	c.stopClose()
	c.unwatch()
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
	// Frames the reader goroutine queued come first.
	select {
	case b, ok := <-c.recvq:
		if !ok {
			return transport.Buffer{}, c.closeErr()
		}
		return b, nil
	default:
	}
	if c.direct && watchable(ctx) {
		if b, err, ok := c.recvDirect(ctx); ok {
			return b, err
		}
	}
	return c.recvQueued(ctx)
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

// DetachBuffer gives a received frame's memory away (transport.Detacher):
// the reader gets its budget back and never sees the memory again, which
// came from internal/bufpool, so the one who detached it may put it back
// there when done. What the connection reads ahead stays bounded by
// RecvQueueBytes; what a receiver keeps detached is its own to bound (the
// RPC server holds a request's only while its handler runs, as it held a
// copy before).
func (o recvOwner) DetachBuffer(w uint64, _ []byte) bool {
	o.c.recvBudget.Release(int64(w))
	return true
}

// pool owns send buffers handed out by NewSendBuffer.
type pool struct{}

func (pool) ReleaseBuffer(_ uint64, b []byte) { bufpool.Put(b) }
