package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/rpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// link is what both ends of an RPC connection share: the transport
// connection, and a control goroutine that sends control frames (PING, PONG,
// CANCEL, GOAWAY) and runs keepalive. Control frames go through that one
// goroutine so the goroutine reading the connection never blocks on a send:
// two peers that both stop reading while they send would otherwise deadlock.
type link struct {
	tc  transport.Conn
	log *zap.Logger
	ka  Keepalive

	ctx    context.Context // done when the link closes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	received atomic.Uint64 // frames received: any frame proves the peer alive

	ctlMu    sync.Mutex
	ctlQueue [][]byte // encoded control frames waiting to be sent
	pongOwed bool     // one pong answers any number of pings
	ctlKick  chan struct{}

	closeOnce sync.Once
	errMu     sync.Mutex
	err       *status.Status // why the link closed
}

func newLink(tc transport.Conn, log *zap.Logger, ka Keepalive) *link {
	l := &link{tc: tc, log: log, ka: ka.withDefaults(), ctlKick: make(chan struct{}, 1)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.controlLoop()
	return l
}

// readFrames hands every frame received to dispatch until the connection
// fails or dispatch reports false; the link is closed when it returns.
func (l *link) readFrames(dispatch func(transport.Buffer) bool) {
	for {
		b, err := l.tc.Recv(l.ctx)
		if err != nil {
			if l.ctx.Err() == nil {
				l.close(transportStatus(err))
			}
			return
		}
		l.received.Add(1)
		if !dispatch(b) {
			return
		}
	}
}

// queueControl sends an encoded control frame from the control goroutine.
func (l *link) queueControl(frame []byte) {
	l.ctlMu.Lock()
	l.ctlQueue = append(l.ctlQueue, frame)
	l.ctlMu.Unlock()
	l.kick()
}

func (l *link) kick() {
	select {
	case l.ctlKick <- struct{}{}:
	default:
	}
}

// owePong arranges for one PONG to be sent; pings that arrive before it is
// sent are answered by the same pong, so a ping flood costs nothing.
func (l *link) owePong() {
	l.ctlMu.Lock()
	l.pongOwed = true
	l.ctlMu.Unlock()
	l.kick()
}

func (l *link) controlLoop() {
	defer l.wg.Done()
	var timer *time.Timer
	var tick <-chan time.Time
	if l.ka.Time > 0 {
		timer = time.NewTimer(l.ka.Time)
		defer timer.Stop()
		tick = timer.C
	}
	seen := l.received.Load()
	pinged := false
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.ctlKick:
			if err := l.flushControl(); err != nil {
				return
			}
		case <-tick:
			now := l.received.Load()
			switch {
			case now != seen:
				seen, pinged = now, false
				timer.Reset(l.ka.Time)
			case pinged:
				l.close(status.Newf(codes.Unavailable, "keepalive: no frame from %s for %v after a ping", l.tc.RemoteAddr(), l.ka.Timeout))
				return
			default:
				if err := l.sendControl(wire.AppendPing(nil, false, uint64(time.Now().UnixNano()))); err != nil {
					return
				}
				pinged = true
				timer.Reset(l.ka.Timeout)
			}
		}
	}
}

func (l *link) flushControl() error {
	l.ctlMu.Lock()
	q := l.ctlQueue
	l.ctlQueue = nil
	pong := l.pongOwed
	l.pongOwed = false
	l.ctlMu.Unlock()
	if pong {
		q = append(q, wire.AppendPing(nil, true, uint64(time.Now().UnixNano())))
	}
	for _, f := range q {
		if err := l.sendControl(f); err != nil {
			return err
		}
	}
	return nil
}

// sendControl sends one control frame. A peer that cannot take even a
// control frame within the keepalive timeout is as good as dead.
func (l *link) sendControl(frame []byte) error {
	ctx, cancel := context.WithTimeout(l.ctx, l.ka.Timeout)
	defer cancel()
	err := l.tc.Send(ctx, frame)
	if err != nil && l.ctx.Err() == nil {
		if errors.Is(err, context.DeadlineExceeded) {
			l.close(status.Newf(codes.Unavailable, "peer %s took no control frame for %v", l.tc.RemoteAddr(), l.ka.Timeout))
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

// protocolError closes the link because the peer broke the protocol: one
// log line, a GOAWAY that tells the peer why (best effort), and the close.
func (l *link) protocolError(err error) {
	st := status.Newf(codes.Internal, "protocol error from %s: %v", l.tc.RemoteAddr(), err)
	l.log.Warn("closing connection", zap.Stringer("peer", l.tc.RemoteAddr()), zap.Error(err))
	ctx, cancel := context.WithTimeout(l.ctx, time.Second)
	_ = l.tc.Send(ctx, wire.AppendGoAway(nil, uint32(codes.Internal), "protocol error: "+err.Error()))
	cancel()
	l.close(st)
}

// close closes the link with st as the reason; the first reason sticks.
func (l *link) close(st *status.Status) {
	l.closeOnce.Do(func() {
		l.errMu.Lock()
		if l.err == nil {
			l.err = st
		}
		l.errMu.Unlock()
		l.cancel()
		l.tc.Close()
	})
}

// wait waits for the control goroutine after close.
func (l *link) wait() { l.wg.Wait() }

// closeStatus is why the link closed, or Unavailable if it has not said.
func (l *link) closeStatus() *status.Status {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if l.err == nil {
		return status.New(codes.Unavailable, "connection closed")
	}
	return l.err
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
// size (ResourceExhausted beyond).
func sendFrame(ctx context.Context, tc transport.Conn, codec Codec, head []byte, v any, limit int) error {
	if sc, ok := codec.(SizedCodec); ok && v != nil {
		n := sc.Size(v)
		if err := checkSize(n, limit, len(head), tc); err != nil {
			return err
		}
		buf, err := tc.NewSendBuffer(ctx, len(head)+n)
		if err != nil {
			return err
		}
		b := buf.Bytes()
		copy(b, head)
		if err := sc.MarshalTo(b[len(head):], v); err != nil {
			buf.Release()
			return status.Errorf(codes.Internal, "encoding %T: %v", v, err)
		}
		return tc.SendBuffer(ctx, buf)
	}
	var payload []byte
	if v != nil {
		var err error
		if payload, err = codec.Marshal(v); err != nil {
			return status.Errorf(codes.Internal, "encoding %T: %v", v, err)
		}
	}
	if err := checkSize(len(payload), limit, len(head), tc); err != nil {
		return err
	}
	b := bufpool.Get(len(head) + len(payload))
	copy(b, head)
	copy(b[len(head):], payload)
	err := tc.Send(ctx, b)
	bufpool.Put(b)
	return err
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
