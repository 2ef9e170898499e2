package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/timers"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The control frames waiting for the flusher while it sits in a Send to a
// peer that does not read are bounded; a peer that takes nothing is cut
// off by the keepalive timeout on that Send. What the local side causes
// (CANCELs and RESETs of calls it gave up, window grants as it reads) may
// wait up to maxQueuedCancels frames. What the peer causes is bounded by
// the server's stream limit instead (serverLink.peerCtlLimit): a client
// that keeps to MAX_CONCURRENT_STREAMS has at most one refusal or reset
// owed per call or stream it counts as open.
const maxQueuedCancels = 64 << 10

// ctlFrame is a control frame waiting for the flusher.
type ctlFrame struct {
	b []byte
	// frees: sending it ends a call or stream the peer still counts
	// (a CANCEL, a client's RESET): the client's slot is free only once
	// it has left, so that no later OPEN or REQUEST overtakes it.
	frees bool
}

// link is what both ends of an RPC connection share: the transport
// connection, its control frames (PING, PONG, CANCEL, GOAWAY, refusals)
// and its timers (keepalive, the response watch). Control frames are queued
// and sent by a flusher goroutine that runs only while some are owed, so
// the goroutine reading the connection never blocks on a send (two peers
// that both stop reading while they send would otherwise deadlock) and an
// idle link has no goroutine but its reader. The timers run on the
// process's shared timer goroutine (rpc/internal/timers).
type link struct {
	tc       transport.Conn
	log      *zap.Logger
	ka       Keepalive
	activity transport.Activity // nil: count whole frames as signs of life

	ctx    context.Context // done when the link closes
	cancel context.CancelFunc
	closed signal.Signal // set with the status error the link closed with
	reason atomic.Pointer[status.Status]
	wg     sync.WaitGroup // the flusher, and closes started by timers

	frames    atomic.Uint64 // frames received
	lastFrame atomic.Int64  // when the last one arrived, Unix nanoseconds
	pongs     atomic.Uint64 // PONGs received
	onPong    func()        // called after each PONG, when set (the server's drain)

	ctlMu      sync.Mutex
	ctlQueue   []ctlFrame  // encoded control frames waiting to be sent
	goAwayOwed []byte      // a GOAWAY to send (it never waits behind the bound)
	pongOwed   bool        // one pong answers any number of pings
	pingOwed   bool        // keepalive's ping
	flushing   bool        // the flusher is running
	ctlClosed  bool        // the link is closed: no goroutine starts any more
	ctlDropped atomic.Bool // a CANCEL was dropped because the queue was full (logged once)
	// freed is called after a frame that frees a slot (ctlFrame.frees) was
	// sent, or dropped; nil: nothing to do (the server's links).
	freed func()

	// Keepalive and the watch; their state is touched only by their
	// timer's function, which never runs twice at once.
	kaTimer    *timers.Timer // nil without keepalive
	kaState    conn.KeepaliveState
	watchTimer *timers.Timer // nil without a watch
	watchStuck int           // consecutive watch ticks with responses waiting and none sent
	watchSent  uint64        // l.sent at the last tick

	flow conn.ConnFlow // the connection window, both ways

	watch   sendWatch
	sending atomic.Int64  // responses being sent, for the watch
	sent    atomic.Uint64 // responses sent or failed
}

// sendWatch gives up a connection whose peer takes none of the responses
// waiting for it for about after (between after and 1.5 × after): it does
// not read, and what those calls hold would stay held. Zero after: no
// watch.
type sendWatch struct {
	after time.Duration
	stuck func() // logs the close
}

func newLink(tc transport.Conn, log *zap.Logger, ka Keepalive, watch sendWatch) *link {
	l := &link{tc: tc, log: log, ka: ka.withDefaults(), watch: watch}
	l.activity, _ = tc.(transport.Activity)
	l.ctx, l.cancel = context.WithCancel(context.Background())
	now := time.Now()
	l.lastFrame.Store(now.UnixNano())
	if l.ka.Time > 0 {
		l.kaState = conn.NewKeepaliveState(l.alive(), now)
		l.kaTimer = timers.Default.NewTimer(l.keepaliveWake)
		l.kaTimer.Reset(l.ka.Time)
	}
	if l.watch.after > 0 {
		l.watchTimer = timers.Default.NewTimer(l.watchTick)
		l.watchTimer.Reset(l.watch.after / 2)
	}
	return l
}

// recvFrame receives the next frame. It fails with ctx's error when it
// gave up for ctx, taking no frame, with the link still open; with
// errLinkClosed (and the link closed) when the connection failed.
func (l *link) recvFrame(ctx context.Context) (transport.Buffer, error) {
	b, err := l.tc.Recv(ctx)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) && l.ctx.Err() == nil {
			return transport.Buffer{}, cerr
		}
		if l.ctx.Err() == nil {
			l.close(transportStatus(err))
		}
		return transport.Buffer{}, errLinkClosed
	}
	l.frames.Add(1)
	l.lastFrame.Store(time.Now().UnixNano())
	return b, nil
}

// errLinkClosed: the connection failed or was closed.
var errLinkClosed = errors.New("rpc: connection closed")

// queueControl sends an encoded control frame from the flusher.
// It reports false, queueing nothing, when limit frames already wait.
func (l *link) queueControl(frame []byte, limit int) bool {
	return l.queueFrame(ctlFrame{b: frame}, limit)
}

func (l *link) queueFrame(f ctlFrame, limit int) bool {
	l.ctlMu.Lock()
	if len(l.ctlQueue) >= limit {
		l.ctlMu.Unlock()
		return false
	}
	l.ctlQueue = append(l.ctlQueue, f)
	l.ctlMu.Unlock()
	l.kick()
	return true
}

// queueEnd sends frame, a CANCEL or a client's RESET that ends a call or
// stream the server counts, and frees its slot once it has left (l.freed).
// When the queue is full the frame is dropped, and the slot freed at once:
// the server's handler then ends by its deadline or with the connection,
// which is stuck anyway.
func (l *link) queueEnd(frame []byte) {
	if l.queueFrame(ctlFrame{b: frame, frees: true}, maxQueuedCancels) {
		return
	}
	if l.freed != nil {
		l.freed()
	}
	if l.ctlDropped.CompareAndSwap(false, true) {
		l.log.Info("the peer takes no control frames: dropping cancellations", zap.Stringer("peer", l.tc.RemoteAddr()))
	}
}

// queueGoAway sends frame, a GOAWAY, from the flusher.
func (l *link) queueGoAway(frame []byte) {
	l.ctlMu.Lock()
	l.goAwayOwed = frame
	l.ctlMu.Unlock()
	l.kick()
}

// kick starts the flusher unless it is running (it sends what was owed
// before it stops) or the link is closed.
func (l *link) kick() {
	l.ctlMu.Lock()
	if l.flushing || l.ctlClosed {
		l.ctlMu.Unlock()
		return
	}
	l.flushing = true
	l.wg.Add(1)
	l.ctlMu.Unlock()
	go l.flush()
}

// flush is the flusher: it sends control frames until none is owed or the
// link fails.
func (l *link) flush() {
	defer l.wg.Done()
	for {
		err := l.flushControl()
		l.ctlMu.Lock()
		if err != nil || !l.owedLocked() {
			l.flushing = false
			l.ctlMu.Unlock()
			return
		}
		l.ctlMu.Unlock()
	}
}

func (l *link) owedLocked() bool {
	return l.pongOwed || l.pingOwed || l.goAwayOwed != nil || len(l.ctlQueue) > 0
}

// goOwned runs f on a goroutine that wait waits for, unless the link is
// closed. Timer functions, which must not block, hand slow work to it.
func (l *link) goOwned(f func()) {
	l.ctlMu.Lock()
	if l.ctlClosed {
		l.ctlMu.Unlock()
		return
	}
	l.wg.Add(1)
	l.ctlMu.Unlock()
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// closeAsync closes the link with st on a goroutine of its own (the
// transport's Close may wait for its teardown), then calls closed if that
// closed it.
func (l *link) closeAsync(st *status.Status, closed func()) {
	l.goOwned(func() { l.closeThen(st, closed) })
}

// owePong arranges for one PONG to be sent; pings that arrive before it is
// sent are answered by the same pong, so a ping flood costs nothing.
func (l *link) owePong() {
	l.ctlMu.Lock()
	l.pongOwed = true
	l.ctlMu.Unlock()
	l.kick()
}

// alive is the count keepalive watches: bytes received when the transport
// counts them (a slow peer in the middle of a large message is alive),
// otherwise frames.
func (l *link) alive() uint64 {
	if l.activity != nil {
		return l.activity.BytesReceived()
	}
	return l.frames.Load()
}

// keepaliveWake is keepalive, run by its timer: a ping once the peer has
// been silent for Time, and the close when nothing arrives within Timeout
// of the ping, so a dead peer is noticed within Time + Timeout of its last
// sign of life (and the timers' coarseness, at most Time/32 more).
func (l *link) keepaliveWake() {
	if l.closed.IsSet() {
		return
	}
	next, act := l.kaState.Wake(time.Now(), l.alive(), time.Unix(0, l.lastFrame.Load()), l.ka.Time, l.ka.Timeout)
	switch act {
	case conn.KeepaliveClose:
		st := status.Newf(codes.Unavailable, "keepalive: nothing from %s within %v of a ping", l.tc.RemoteAddr(), l.ka.Timeout)
		l.closeAsync(st, func() {
			l.log.Info("keepalive: closing a silent connection", zap.Stringer("peer", l.tc.RemoteAddr()),
				zap.Duration("time", l.ka.Time), zap.Duration("timeout", l.ka.Timeout))
		})
		return
	case conn.KeepalivePing:
		l.ctlMu.Lock()
		l.pingOwed = true
		l.ctlMu.Unlock()
		l.kick()
	}
	l.kaTimer.Reset(next)
}

// watchTick is the response watch, every after/2: it gives the connection
// up at the third tick in a row with responses waiting and none sent (a
// response in progress at the first of them has waited two intervals, the
// whole bound).
func (l *link) watchTick() {
	if l.closed.IsSet() {
		return
	}
	if n := l.sent.Load(); n != l.watchSent || l.sending.Load() == 0 {
		l.watchStuck, l.watchSent = 0, n
	} else if l.watchStuck++; l.watchStuck >= 3 {
		l.closeAsync(status.Newf(codes.Unavailable, "the peer took no response for %v", l.watch.after), l.watch.stuck)
		return
	}
	l.watchTimer.Reset(l.watch.after / 2)
}

// flushControl sends what is owed: a pong, keepalive's ping, a GOAWAY,
// then the queued frames one at a time, so a frame counts against the
// queue's bound until it has been sent.
func (l *link) flushControl() error {
	l.ctlMu.Lock()
	pong, ping := l.pongOwed, l.pingOwed
	l.pongOwed, l.pingOwed = false, false
	ga := l.goAwayOwed
	l.goAwayOwed = nil
	l.ctlMu.Unlock()
	if pong {
		if err := l.sendKeepalive(wire.AppendPing(nil, true, uint64(time.Now().UnixNano()))); err != nil {
			return err
		}
	}
	if ping {
		if err := l.sendKeepalive(wire.AppendPing(nil, false, uint64(time.Now().UnixNano()))); err != nil {
			return err
		}
	}
	if ga != nil {
		if err := l.sendControl(ga); err != nil {
			return err
		}
	}
	for {
		l.ctlMu.Lock()
		if len(l.ctlQueue) == 0 {
			l.ctlQueue = nil // let a burst's backing array go
			l.ctlMu.Unlock()
			return nil
		}
		f := l.ctlQueue[0]
		l.ctlQueue[0] = ctlFrame{}
		l.ctlQueue = l.ctlQueue[1:]
		l.ctlMu.Unlock()
		err := l.sendControl(f.b)
		if f.frees && l.freed != nil {
			l.freed()
		}
		if err != nil {
			return err
		}
	}
}

// sendControl sends one control frame. A peer that cannot take even a
// control frame within the keepalive timeout is as good as dead.
func (l *link) sendControl(frame []byte) error {
	return l.sendControlVia(l.tc.Send, frame, "control frame")
}

// sendKeepalive sends a PING or PONG as a background send where the
// transport has one (transport.BackgroundSender): nobody waits on its
// answer soon (a PONG has Timeout to come) and a closing connection needs
// neither, so rdma:// spares both ends the reader's spin for a quick reply
// and the send's completion.
// A peer that takes no PING or PONG is closed as keepalive's: the error
// says so, as when a PONG does not come.
func (l *link) sendKeepalive(frame []byte) error {
	send := l.tc.Send
	if bs, ok := l.tc.(transport.BackgroundSender); ok {
		send = bs.SendBackground
	}
	return l.sendControlVia(send, frame, "keepalive frame")
}

// sendControlVia sends frame, a what, with send.
func (l *link) sendControlVia(send func(context.Context, []byte) error, frame []byte, what string) error {
	ctx, cancel := context.WithTimeout(l.ctx, l.ka.Timeout)
	defer cancel()
	err := send(ctx, frame)
	if err != nil && l.ctx.Err() == nil {
		if errors.Is(err, context.DeadlineExceeded) {
			st := status.Newf(codes.Unavailable, "peer %s took no %s for %v", l.tc.RemoteAddr(), what, l.ka.Timeout)
			if l.close(st) {
				l.log.Info("closing a connection whose peer does not read", zap.Stringer("peer", l.tc.RemoteAddr()), zap.Duration("timeout", l.ka.Timeout))
			}
		} else {
			l.close(transportStatus(err))
		}
	}
	return err
}

// control handles the frames both ends treat alike: it answers PINGs,
// takes PONGs, and decodes a GOAWAY for the caller to act on. Any other
// kind reaching it is one the peer's role never sends: "server sent a
// REQUEST frame, which only clients send".
func (l *link) control(h wire.Header, body []byte, peer, others string) (*wire.GoAway, error) {
	switch h.Kind {
	case wire.KindPing:
		if _, err := wire.ParsePing(body); err != nil {
			return nil, err
		}
		l.owePong()
		return nil, nil
	case wire.KindPong:
		_, err := wire.ParsePing(body)
		if err == nil {
			l.pongs.Add(1)
			if l.onPong != nil {
				l.onPong()
			}
		}
		return nil, err
	case wire.KindGoAway:
		ga, err := wire.ParseGoAway(body)
		if err != nil {
			return nil, err
		}
		return &ga, nil
	}
	return nil, fmt.Errorf("%s sent a %v frame, which only %s send", peer, h.Kind, others)
}

// protocolError closes the link because the peer broke the protocol: a
// GOAWAY that tells the peer why (best effort), and the close. It returns
// the status the link closed with, for the caller to log.
func (l *link) protocolError(err error) *status.Status {
	st := status.Newf(codes.Internal, "protocol error from %s: %v", l.tc.RemoteAddr(), err)
	ctx, cancel := context.WithTimeout(l.ctx, time.Second)
	_ = l.tc.Send(ctx, wire.AppendGoAway(nil, uint32(codes.Internal), "protocol error: "+err.Error()))
	cancel()
	l.close(st)
	return st
}

// setReason records why the peer says it is closing (a GOAWAY with an
// error code): the close that follows reports it instead of its own reason.
func (l *link) setReason(st *status.Status) { l.reason.CompareAndSwap(nil, st) }

// close closes the link with st as the reason; the first reason sticks. It
// reports whether this call closed it.
func (l *link) close(st *status.Status) bool { return l.closeThen(st, nil) }

// closeThen is close, running won (if not nil) when this call closes the
// link, before anything sees it closed: a log line saying why comes before
// the calls fail.
func (l *link) closeThen(st *status.Status, won func()) bool {
	if r := l.reason.Load(); r != nil {
		st = r
	}
	if !l.closed.Set(st.Err()) {
		return false
	}
	if won != nil {
		won()
	}
	l.ctlMu.Lock()
	l.ctlClosed = true
	l.ctlMu.Unlock()
	for _, t := range []*timers.Timer{l.kaTimer, l.watchTimer} {
		if t != nil {
			t.Stop()
		}
	}
	l.cancel()
	l.tc.Close()
	return true
}

// wait waits, after close, for the goroutines the link started.
func (l *link) wait() { l.wg.Wait() }

// closeStatus is why the link closed, or Unavailable if it has not said.
func (l *link) closeStatus() *status.Status {
	if err := l.closed.Err(); err != nil {
		return status.Convert(err)
	}
	if r := l.reason.Load(); r != nil {
		return r
	}
	return status.New(codes.Unavailable, "connection closed")
}

// transportStatus maps a transport error to the status a call reports.
func transportStatus(err error) *status.Status {
	switch {
	case errors.Is(err, transport.ErrMessageTooLarge):
		return status.New(codes.ResourceExhausted, err.Error())
	case errors.Is(err, transport.ErrProtocol):
		return status.New(codes.Internal, err.Error())
	case errors.Is(err, transport.ErrClosed):
		return status.New(codes.Unavailable, err.Error())
	}
	if st := status.FromContextError(err); st != nil {
		return st
	}
	return status.New(codes.Unavailable, err.Error())
}

// sendFrame sends head followed by v's encoding as one message, encoding v
// in place in transport memory when the codec can. limit caps the payload
// size (ResourceExhausted beyond). With a budget, the whole frame's bytes
// are acquired from it before v is encoded and given back once the
// transport has taken the frame (or refused it). With a connection window
// (a stream's MESSAGE), the frame's cost is taken from it first, and given
// back when the frame is not sent. With an estimate (a unary response),
// the frame's size is told to it as soon as it is known, before the
// budget is waited for. It returns the payload's size.
func sendFrame(ctx context.Context, tc transport.Conn, codec Codec, head []byte, v any, limit int, budget *conn.ByteBudget, flow *conn.ConnFlow, est *conn.RespEstimate) (int, error) {
	if sc, ok := codec.(SizedCodec); ok && v != nil {
		n := sc.Size(v)
		est.Observe(len(head) + n)
		if err := checkSize(n, limit, len(head), tc); err != nil {
			return n, err
		}
		if !flow.Take(ctx, len(head)+n) {
			return n, ctx.Err()
		}
		if budget != nil {
			if err := budget.Acquire(ctx, len(head)+n); err != nil {
				flow.GiveBack(len(head) + n)
				return n, err
			}
			defer budget.Release(len(head) + n)
		}
		buf, err := tc.NewSendBuffer(ctx, len(head)+n)
		if err != nil {
			flow.GiveBack(len(head) + n)
			return n, err
		}
		b := buf.Bytes()
		copy(b, head)
		if err := sc.MarshalTo(b[len(head):], v); err != nil {
			buf.Release()
			flow.GiveBack(len(head) + n)
			return n, status.Errorf(codes.Internal, "encoding %T: %v", v, err)
		}
		if err := tc.SendBuffer(ctx, buf); err != nil {
			flow.GiveBack(len(head) + n)
			return n, err
		}
		return n, nil
	}
	var payload []byte
	if v != nil {
		var err error
		if payload, err = codec.Marshal(v); err != nil {
			return 0, status.Errorf(codes.Internal, "encoding %T: %v", v, err)
		}
	}
	n := len(payload)
	est.Observe(len(head) + n)
	if err := checkSize(n, limit, len(head), tc); err != nil {
		return n, err
	}
	if !flow.Take(ctx, len(head)+n) {
		return n, ctx.Err()
	}
	if budget != nil {
		if err := budget.Acquire(ctx, len(head)+n); err != nil {
			flow.GiveBack(len(head) + n)
			return n, err
		}
		defer budget.Release(len(head) + n)
	}
	b := bufpool.Get(len(head) + n)
	copy(b, head)
	copy(b[len(head):], payload)
	err := tc.Send(ctx, b)
	bufpool.Put(b)
	if err != nil {
		flow.GiveBack(len(head) + n)
	}
	return n, err
}

func checkSize(n, limit, head int, tc transport.Conn) error {
	if n > limit {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the limit (%d)", n, limit)
	}
	if max := tc.MaxMessageSize() - head; n > max {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the peer accepts (%d)", n, max)
	}
	return nil
}
