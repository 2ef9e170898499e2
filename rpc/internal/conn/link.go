package conn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/rpc/internal/timers"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The control frames waiting for the flusher while it sits in a Send to a
// peer that does not read are bounded; a peer that takes nothing is cut
// off by the keepalive timeout on that Send. What the local side causes
// (CANCELs and RESETs of calls it gave up, window grants as it reads) may
// wait up to MaxQueuedCancels frames. What the peer causes is bounded by
// the server's stream limit instead (the rpc server's peerCtlLimit): a client
// that keeps to MAX_CONCURRENT_STREAMS has at most one refusal or reset
// owed per call or stream it counts as open.
const MaxQueuedCancels = 64 << 10

// ctlFrame is a control frame waiting for the flusher.
type ctlFrame struct {
	b []byte
	// frees: sending it ends a call or stream the peer still counts
	// (a CANCEL, a client's RESET): the client's slot is free only once
	// it has left, so that no later OPEN or REQUEST overtakes it.
	frees bool
}

// Link is what both ends of an RPC connection share: the transport
// connection, its control frames (PING, PONG, CANCEL, GOAWAY, refusals)
// and its timers (keepalive, the response watch). Control frames are queued
// and sent by a flusher goroutine that runs only while some are owed, so
// the goroutine reading the connection never blocks on a send (two peers
// that both stop reading while they send would otherwise deadlock) and an
// idle link has no goroutine but its reader. The timers run on the
// process's shared timer goroutine (rpc/internal/timers).
type Link struct {
	Conn     transport.Conn
	Log      *zap.Logger
	ka       Keepalive
	activity transport.Activity // nil: count whole frames as signs of life

	Ctx    context.Context // done when the link closes
	cancel context.CancelFunc
	closed signal.Signal // set with the status error the link closed with
	reason atomic.Pointer[status.Status]
	wg     sync.WaitGroup // the flusher, and closes started by timers

	frames    atomic.Uint64 // frames received
	lastFrame atomic.Int64  // when the last one arrived, Unix nanoseconds
	pongs     atomic.Uint64 // PONGs received
	pings     atomic.Uint64 // keepalive PINGs sent
	onPong    func()        // called after each PONG, when set (the server's drain)

	ctlMu      sync.Mutex
	ctlQueue   []ctlFrame  // encoded control frames waiting to be sent
	goAwayOwed []byte      // a GOAWAY to send (it never waits behind the bound)
	pongOwed   bool        // one pong answers any number of pings
	pingOwed   bool        // keepalive's ping
	flushing   bool        // the flusher is running
	ctlClosed  bool        // the link is closed: no goroutine starts any more
	ctlDropped atomic.Bool // a CANCEL was dropped because the queue was full (logged once)
	// try is the transport's TrySender (nil: none), with which SendWindow
	// sends a WINDOW_UPDATE itself, and keepalive a PING or PONG
	// (sendPingNow), encoded in winBuf under winMu.
	try    transport.TrySender
	reply  transport.Replier // the transport's, nil: none
	winMu  sync.Mutex
	winBuf [24]byte
	// freed is called after a frame that frees a slot (ctlFrame.frees) was
	// sent, or dropped; nil: nothing to do (the server's links).
	freed func()

	// Keepalive and the watch; their state is touched only by their
	// timer's function, which never runs twice at once.
	kaTimer    *timers.Timer // nil without keepalive
	kaState    KeepaliveState
	watchTimer *timers.Timer // nil without a watch
	watchStuck int           // consecutive watch ticks with responses waiting and none sent
	watchSent  uint64        // l.sent at the last tick

	Flow ConnFlow // the connection window, both ways

	watch   SendWatch
	sending atomic.Int64  // responses being sent, for the watch
	sent    atomic.Uint64 // responses sent or failed
}

// LinkConfig is what a link is made with.
type LinkConfig struct {
	Log       *zap.Logger
	Keepalive Keepalive
	Watch     SendWatch // the server's; zero: none
	// OnPong is called after each PONG, when set (the server's drain).
	OnPong func()
	// Freed is called after a frame that frees one of the peer's slots
	// (a CANCEL, a client's RESET) was sent, or dropped, when set (the
	// client's Slots).
	Freed func()
}

// SendWatch gives up a connection whose peer takes none of the responses
// waiting for it for about after (between after and 1.5 × after): it does
// not read, and what those calls hold would stay held. Zero after: no
// watch.
type SendWatch struct {
	After time.Duration
	Stuck func() // logs the close
}

// Keepalive is what a link's keepalive does: a ping after Time of silence
// from the peer (0 or less: none), the connection given up when nothing
// comes within Timeout of it. Timeout also bounds each control frame's
// send. The rpc package fills in its defaults.
type Keepalive struct {
	Time, Timeout time.Duration
}

// NewLink starts a link over tc: its keepalive and the response watch
// (the server's) start now, on the process's timer goroutine.
func NewLink(tc transport.Conn, c LinkConfig) *Link {
	l := &Link{Conn: tc, Log: c.Log, ka: c.Keepalive, watch: c.Watch, onPong: c.OnPong, freed: c.Freed}
	l.activity, _ = tc.(transport.Activity)
	l.try, _ = tc.(transport.TrySender)
	l.reply, _ = tc.(transport.Replier)
	l.Ctx, l.cancel = context.WithCancel(context.Background())
	now := time.Now()
	l.lastFrame.Store(now.UnixNano())
	if l.ka.Time > 0 {
		l.kaState = NewKeepaliveState(l.alive(), now)
		l.kaTimer = timers.Default.NewTimer(l.keepaliveWake)
		l.kaTimer.Reset(l.ka.Time)
	}
	if l.watch.After > 0 {
		l.watchTimer = timers.Default.NewTimer(l.watchTick)
		l.watchTimer.Reset(l.watch.After / 2)
	}
	return l
}

// RecvFrame receives the next frame. It fails with ctx's error when it
// gave up for ctx, taking no frame, with the link still open; with
// ErrLinkClosed (and the link closed) when the connection failed.
func (l *Link) RecvFrame(ctx context.Context) (transport.Buffer, error) {
	b, err := l.Conn.Recv(ctx)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) && l.Ctx.Err() == nil {
			return transport.Buffer{}, cerr
		}
		if l.Ctx.Err() == nil {
			l.Close(TransportStatus(err))
		}
		return transport.Buffer{}, ErrLinkClosed
	}
	l.frames.Add(1)
	l.lastFrame.Store(time.Now().UnixNano())
	return b, nil
}

// ErrLinkClosed: the connection failed or was closed.
var ErrLinkClosed = errors.New("rpc: connection closed")

// SendWindow grants the peer n more bytes on stream id (ConnStream: the
// whole connection). When the transport can take the WINDOW_UPDATE at once
// and no control frame waits before it, the calling goroutine (one that
// has just read a message, never the reader) sends it itself, allocating
// nothing; otherwise the flusher sends it, as QueueControl. It reports
// false, sending nothing, when limit frames already wait.
func (l *Link) SendWindow(id uint64, n uint32, limit int) bool {
	if l.try != nil && l.sendWindowNow(id, n) {
		return true
	}
	return l.QueueControl(wire.AppendWindow(nil, id, n), limit)
}

// sendWindowNow reports whether it sent the update, or need not: the link
// failed.
func (l *Link) sendWindowNow(id uint64, n uint32) bool {
	l.ctlMu.Lock()
	behind := l.flushing || len(l.ctlQueue) > 0 || l.ctlClosed
	l.ctlMu.Unlock()
	if behind {
		return false
	}
	l.winMu.Lock()
	sent, err := l.try.TrySend(wire.AppendWindow(l.winBuf[:0], id, n))
	l.winMu.Unlock()
	if err != nil {
		if l.Ctx.Err() == nil {
			l.Close(TransportStatus(err))
		}
		return true
	}
	return sent
}

// sendPingNow sends a PING (with pong, a PONG) from the calling goroutine
// when the transport can send it without waiting (transport.TrySender)
// and no control frame waits ahead of it, and reports whether it sent it,
// or need not: the link failed. An idle connection's keepalive round then
// starts no flusher goroutine, makes no context and allocates nothing; a
// ping that would wait goes the flusher's way, under its timeout. ping
// is the PING a PONG answers (zero: none): it is released, through the
// transport's TryReply when it has one (transport.Replier), so that what
// its buffer held goes back on the PONG.
func (l *Link) sendPingNow(pong bool, ping transport.Buffer) bool {
	if l.try == nil {
		ping.Release()
		return false
	}
	l.ctlMu.Lock()
	behind := l.flushing || len(l.ctlQueue) > 0 || l.ctlClosed
	l.ctlMu.Unlock()
	if behind {
		ping.Release()
		return false
	}
	l.winMu.Lock()
	frame := wire.AppendPing(l.winBuf[:0], pong, uint64(time.Now().UnixNano()))
	var sent bool
	var err error
	if pong && l.reply != nil {
		sent, err = l.reply.TryReply(ping, frame)
	} else if l.reply != nil {
		sent, err = l.reply.TryAsk(frame)
	} else {
		ping.Release()
		sent, err = l.try.TrySend(frame)
	}
	l.winMu.Unlock()
	if err != nil {
		if l.Ctx.Err() == nil {
			l.Close(TransportStatus(err))
		}
		return true
	}
	return sent
}

// QueueControl sends an encoded control frame from the flusher.
// It reports false, queueing nothing, when limit frames already wait.
func (l *Link) QueueControl(frame []byte, limit int) bool {
	return l.queueFrame(ctlFrame{b: frame}, limit)
}

func (l *Link) queueFrame(f ctlFrame, limit int) bool {
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

// QueueEnd sends frame, a CANCEL or a client's RESET that ends a call or
// stream the server counts, and frees its slot once it has left (l.freed).
// When the queue is full the frame is dropped, and the slot freed at once:
// the server's handler then ends by its deadline or with the connection,
// which is stuck anyway.
func (l *Link) QueueEnd(frame []byte) {
	if l.queueFrame(ctlFrame{b: frame, frees: true}, MaxQueuedCancels) {
		return
	}
	if l.freed != nil {
		l.freed()
	}
	if l.ctlDropped.CompareAndSwap(false, true) {
		l.Log.Info("the peer takes no control frames: dropping cancellations", zap.Stringer("peer", l.Conn.RemoteAddr()))
	}
}

// QueueGoAway sends frame, a GOAWAY, from the flusher.
func (l *Link) QueueGoAway(frame []byte) {
	l.ctlMu.Lock()
	l.goAwayOwed = frame
	l.ctlMu.Unlock()
	l.kick()
}

// kick starts the flusher unless it is running (it sends what was owed
// before it stops) or the link is closed.
func (l *Link) kick() {
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
func (l *Link) flush() {
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

func (l *Link) owedLocked() bool {
	return l.pongOwed || l.pingOwed || l.goAwayOwed != nil || len(l.ctlQueue) > 0
}

// GoOwned runs f on a goroutine that Wait waits for, unless the link is
// closed. Timer functions, which must not block, hand slow work to it.
func (l *Link) GoOwned(f func()) {
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
func (l *Link) closeAsync(st *status.Status, closed func()) {
	l.GoOwned(func() { l.closeThen(st, closed) })
}

// owePong sends a PONG at once when the transport can without waiting,
// else arranges for one to be sent by the flusher; pings that arrive
// before that one is sent are answered by the same pong, so a ping flood
// queues nothing.
func (l *Link) owePong(ping transport.Buffer) {
	if l.sendPingNow(true, ping) {
		return
	}
	l.ctlMu.Lock()
	l.pongOwed = true
	l.ctlMu.Unlock()
	l.kick()
}

// alive is the count keepalive watches: bytes received when the transport
// counts them (a slow peer in the middle of a large message is alive),
// otherwise frames.
func (l *Link) alive() uint64 {
	if l.activity != nil {
		return l.activity.BytesReceived()
	}
	return l.frames.Load()
}

// Frames is how many frames the link received.
func (l *Link) Frames() uint64 { return l.frames.Load() }

// LastFrame is when the last frame arrived (when the link was made, before
// any).
func (l *Link) LastFrame() time.Time { return time.Unix(0, l.lastFrame.Load()) }

// PingsSent is the number of keepalive PINGs sent.
func (l *Link) PingsSent() uint64 { return l.pings.Load() }

// Pongs is how many PONGs the link received.
func (l *Link) Pongs() uint64 { return l.pongs.Load() }

// Keepalive is the link's keepalive.
func (l *Link) Keepalive() Keepalive { return l.ka }

// ResponseStart and ResponseDone bracket the sending of a response (or a
// stream message), which the response watch counts.
func (l *Link) ResponseStart() { l.sending.Add(1) }

// ResponseDone: see ResponseStart.
func (l *Link) ResponseDone() {
	l.sent.Add(1)
	l.sending.Add(-1)
}

// ResponsesSending is how many responses are being sent.
func (l *Link) ResponsesSending() int64 { return l.sending.Load() }

// keepaliveWake is keepalive, run by its timer: a ping once the peer has
// been silent for Time, and the close when nothing arrives within Timeout
// of the ping, so a dead peer is noticed within Time + Timeout of its last
// sign of life (and the timers' coarseness, at most Time/32 more).
func (l *Link) keepaliveWake() {
	if l.closed.IsSet() {
		return
	}
	next, act := l.kaState.Wake(time.Now(), l.alive(), time.Unix(0, l.lastFrame.Load()), l.ka.Time, l.ka.Timeout)
	switch act {
	case KeepaliveClose:
		st := status.Newf(codes.Unavailable, "keepalive: nothing from %s within %v of a ping", l.Conn.RemoteAddr(), l.ka.Timeout)
		l.closeAsync(st, func() {
			l.Log.Info("keepalive: closing a silent connection", zap.Stringer("peer", l.Conn.RemoteAddr()),
				zap.Duration("time", l.ka.Time), zap.Duration("timeout", l.ka.Timeout))
		})
		return
	case KeepalivePing:
		if !l.sendPingNow(false, transport.Buffer{}) {
			l.ctlMu.Lock()
			l.pingOwed = true
			l.ctlMu.Unlock()
			l.kick()
		}
	}
	l.kaTimer.Reset(next)
}

// watchTick is the response watch, every after/2: it gives the connection
// up at the third tick in a row with responses waiting and none sent (a
// response in progress at the first of them has waited two intervals, the
// whole bound).
func (l *Link) watchTick() {
	if l.closed.IsSet() {
		return
	}
	if n := l.sent.Load(); n != l.watchSent || l.sending.Load() == 0 {
		l.watchStuck, l.watchSent = 0, n
	} else if l.watchStuck++; l.watchStuck >= 3 {
		l.closeAsync(status.Newf(codes.Unavailable, "the peer took no response for %v", l.watch.After), l.watch.Stuck)
		return
	}
	l.watchTimer.Reset(l.watch.After / 2)
}

// flushControl sends what is owed: a pong, keepalive's ping, a GOAWAY,
// then the queued frames one at a time, so a frame counts against the
// queue's bound until it has been sent.
func (l *Link) flushControl() error {
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
		l.pings.Add(1)
	}
	if ga != nil {
		if err := l.SendControl(ga); err != nil {
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
		err := l.SendControl(f.b)
		if f.frees && l.freed != nil {
			l.freed()
		}
		if err != nil {
			return err
		}
	}
}

// SendControl sends one control frame. A peer that cannot take even a
// control frame within the keepalive timeout is as good as dead.
func (l *Link) SendControl(frame []byte) error {
	return l.sendControlVia(l.Conn.Send, frame, "control frame")
}

// sendKeepalive sends a PING or PONG as a background send where the
// transport has one (transport.BackgroundSender): nobody waits on its
// answer soon (a PONG has Timeout to come) and a closing connection needs
// neither, so rdma:// spares both ends the reader's spin for a quick reply
// and the send's completion.
// A peer that takes no PING or PONG is closed as keepalive's: the error
// says so, as when a PONG does not come.
func (l *Link) sendKeepalive(frame []byte) error {
	send := l.Conn.Send
	if bs, ok := l.Conn.(transport.BackgroundSender); ok {
		send = bs.SendBackground
	}
	return l.sendControlVia(send, frame, "keepalive frame")
}

// sendControlVia sends frame, a what, with send. It gives the peer up when
// the frame waited Timeout and nothing came from the peer meanwhile: a peer
// that is sending is alive, only slow to take what we send (a slow machine,
// our own large messages ahead of the frame), and a send that gives up
// leaves nothing half sent, so it is tried again.
func (l *Link) sendControlVia(send func(context.Context, []byte) error, frame []byte, what string) error {
	var err error
	for {
		seen := l.alive()
		ctx, cancel := context.WithTimeout(l.Ctx, l.ka.Timeout)
		err = send(ctx, frame)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || l.Ctx.Err() != nil || l.alive() == seen {
			break
		}
	}
	if err != nil && l.Ctx.Err() == nil {
		if errors.Is(err, context.DeadlineExceeded) {
			st := status.Newf(codes.Unavailable, "peer %s took no %s for %v", l.Conn.RemoteAddr(), what, l.ka.Timeout)
			if l.Close(st) {
				l.Log.Info("closing a connection whose peer does not read", zap.Stringer("peer", l.Conn.RemoteAddr()), zap.Duration("timeout", l.ka.Timeout))
			}
		} else {
			l.Close(TransportStatus(err))
		}
	}
	return err
}

// Control handles the frames both ends treat alike, and releases b, the
// buffer of the frame h, body: it answers PINGs, takes PONGs, and decodes
// a GOAWAY for the caller to act on. Any other kind reaching it is one the
// peer's role never sends: "server sent a REQUEST frame, which only
// clients send".
func (l *Link) Control(h wire.Header, body []byte, b transport.Buffer, peer, others string) (*wire.GoAway, error) {
	if h.Kind == wire.KindPing {
		if _, err := wire.ParsePing(body); err != nil {
			b.Release()
			return nil, err
		}
		l.owePong(b)
		return nil, nil
	}
	defer b.Release()
	switch h.Kind {
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

// ProtocolError closes the link because the peer broke the protocol: a
// GOAWAY that tells the peer why (best effort), and the close. It returns
// the status the link closed with, for the caller to log.
func (l *Link) ProtocolError(err error) *status.Status {
	st := status.Newf(codes.Internal, "protocol error from %s: %v", l.Conn.RemoteAddr(), err)
	ctx, cancel := context.WithTimeout(l.Ctx, time.Second)
	_ = l.Conn.Send(ctx, wire.AppendGoAway(nil, uint32(codes.Internal), "protocol error: "+err.Error()))
	cancel()
	l.Close(st)
	return st
}

// SetReason records why the peer says it is closing (a GOAWAY with an
// error code): the close that follows reports it instead of its own reason.
func (l *Link) SetReason(st *status.Status) { l.reason.CompareAndSwap(nil, st) }

// Close closes the link with st as the reason; the first reason sticks. It
// reports whether this call closed it.
func (l *Link) Close(st *status.Status) bool { return l.closeThen(st, nil) }

// closeThen is close, running won (if not nil) when this call closes the
// link, before anything sees it closed: a log line saying why comes before
// the calls fail.
func (l *Link) closeThen(st *status.Status, won func()) bool {
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
	l.Conn.Close()
	return true
}

// Wait waits, after close, for the goroutines the link started.
func (l *Link) Wait() { l.wg.Wait() }

// CloseStatus is why the link closed, or Unavailable if it has not said.
func (l *Link) CloseStatus() *status.Status {
	if err := l.closed.Err(); err != nil {
		return status.Convert(err)
	}
	if r := l.reason.Load(); r != nil {
		return r
	}
	return status.New(codes.Unavailable, "connection closed")
}

// TransportStatus maps a transport error to the status a call reports.
func TransportStatus(err error) *status.Status {
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

// ConnFree gives cost bytes of the connection window back to the peer,
// once a batch is due.
func (l *Link) ConnFree(cost int) {
	if grant := l.Flow.Free(cost); grant > 0 && !l.SendWindow(ConnStream, uint32(grant), MaxQueuedCancels) {
		l.Flow.Ungrant(grant)
	}
}

// ConnWindowUpdate takes a WINDOW_UPDATE for stream 0.
func (l *Link) ConnWindowUpdate(body []byte) error {
	n, err := wire.ParseWindow(body)
	if err != nil {
		return err
	}
	if !l.Flow.Add(int64(n)) {
		return errors.New("flow control: connection window updates past 2^31-1 bytes")
	}
	return nil
}
