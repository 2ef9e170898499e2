package rpc

import (
	"context"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/rpc/internal/timers"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
)

// KeepaliveParams sets the server's keepalive: an rpc.Keepalive (Time,
// Timeout), or gRPC-go's keepalive.ServerParameters, which add
// MaxConnectionIdle, MaxConnectionAge and MaxConnectionAgeGrace.
func KeepaliveParams[P Keepalive | keepalive.ServerParameters](p P) ServerOption {
	return serverOptionFunc(func(o *serverOptions) {
		switch p := any(p).(type) {
		case Keepalive:
			o.keepalive = p
		case keepalive.ServerParameters:
			o.keepalive = Keepalive{Time: p.Time, Timeout: p.Timeout}
			o.conn = p
		}
	})
}

// KeepaliveEnforcementPolicy makes the server close, with GOAWAY
// "too_many_pings", the connection of a client that pings more often than
// p allows, as gRPC-go's. Without it no ping is refused.
func KeepaliveEnforcementPolicy(p keepalive.EnforcementPolicy) ServerOption {
	return serverOptionFunc(func(o *serverOptions) { o.enforcement = &p })
}

// WithKeepaliveParams sets the client's keepalive from gRPC-go's
// keepalive.ClientParameters (see WithKeepalive).
func WithKeepaliveParams(p keepalive.ClientParameters) DialOption {
	return func(o *dialOptions) { o.keepalive = Keepalive{Time: p.Time, Timeout: p.Timeout} }
}

// The GOAWAY messages of connection management; a client recognises
// tooManyPings.
const (
	tooManyPings = "too_many_pings"
	maxIdle      = "max_idle"
	maxAge       = "max_age"
	// maxPingStrikes pings too early are forgiven, as gRPC-go's; the next
	// one closes the connection.
	maxPingStrikes = 2
	// pingWithoutCallsInterval is the least interval of pings without
	// calls when the policy does not permit them (gRPC-go's 2 hours).
	pingWithoutCallsInterval = 2 * time.Hour
)

// pingAllowed counts a ping from the client against the enforcement
// policy; it reports false when the client has pinged too often. Only the
// reader calls it.
func (l *serverLink) pingAllowed(now time.Time) bool {
	p := l.s.opts.enforcement
	if p == nil {
		return true
	}
	least := p.MinTime
	if !p.PermitWithoutStream && !l.busy() {
		least = max(least, pingWithoutCallsInterval)
	}
	if !l.lastPing.IsZero() && now.Sub(l.lastPing) < least {
		l.pingStrikes++
	}
	l.lastPing = now
	return l.pingStrikes <= maxPingStrikes
}

// closable reports whether a draining connection may be closed: settled,
// no call or stream open, and no response on its way (a unary call leaves
// the calls before its response is sent, and counts as sending first).
func (l *serverLink) closable() bool {
	return l.timers.settled.Load() && !l.busy() && l.ResponsesSending() == 0
}

// busy reports whether a call or stream is open on l.
func (l *serverLink) busy() bool {
	l.adm.mu.Lock()
	defer l.adm.mu.Unlock()
	return len(l.adm.calls)+len(l.adm.streams) > 0
}

// refusePings closes the connection of a client that pings too often: a
// GOAWAY "too_many_pings" (so the client backs off), then the close.
func (l *serverLink) refusePings() {
	l.s.peerLog.warn("closing the connection of a client that pings too often", zap.Stringer("peer", l.peer.Addr),
		zap.Duration("min_time", l.s.opts.enforcement.MinTime), zap.Bool("permit_without_stream", l.s.opts.enforcement.PermitWithoutStream))
	l.goAwayClose(status.New(codes.Unavailable, tooManyPings))
}

// goAwayClose closes the connection with st, after a GOAWAY that tells the
// client why (best effort, within a second), so its calls fail with st.
func (l *serverLink) goAwayClose(st *status.Status) {
	ctx, cancel := context.WithTimeout(l.Ctx, time.Second)
	_ = l.Conn.Send(ctx, wire.AppendGoAway(nil, uint32(st.Code()), st.Message()))
	cancel()
	l.Close(st)
}

// connTimers carry out ServerParameters' idle and age limits on one
// connection: timers on the process's shared timer goroutine, no goroutine
// of their own.
type connTimers struct {
	mu       sync.Mutex
	stopped  bool
	draining bool // GOAWAY sent
	idle     *timers.Timer
	age      *timers.Timer
	grace    *timers.Timer
	lastEnd  atomic.Int64 // when the last call or stream ended, Unix nanoseconds
	start    time.Time

	// After a GOAWAY: the server closes the connection itself once no
	// call or stream is left and none can still be on its way (settled:
	// the PING sent after the GOAWAY came back, or the keepalive timeout
	// passed without it), whether or not the client closes it.
	drainPongs uint64        // l.pongs when the GOAWAY was queued
	settled    atomic.Bool   // nothing sent before the GOAWAY is still to arrive
	settle     *timers.Timer // the keepalive timeout for the PONG
}

// startConnTimers arms the limits of l's connection, if any.
func (l *serverLink) startConnTimers() {
	p := l.s.opts.conn
	if p.MaxConnectionIdle <= 0 && p.MaxConnectionAge <= 0 {
		return
	}
	t := &l.timers
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start = time.Now()
	if p.MaxConnectionIdle > 0 {
		t.idle = timers.Default.NewTimer(l.checkIdle)
		t.idle.Reset(p.MaxConnectionIdle)
	}
	if p.MaxConnectionAge > 0 {
		// ±10 %, so connections made together do not all go together.
		age := p.MaxConnectionAge + time.Duration((rand.Float64()*0.2-0.1)*float64(p.MaxConnectionAge))
		t.age = timers.Default.AfterFunc(age, func() { l.drain(maxAge) })
	}
}

// callEnded notes that a call or stream ended, for MaxConnectionIdle.
func (l *serverLink) callEnded() {
	if l.s.opts.conn.MaxConnectionIdle > 0 {
		l.timers.lastEnd.Store(time.Now().UnixNano())
	}
}

// answered: a call's response, or a stream's TRAILERS, has gone; a
// draining connection may be done.
func (l *serverLink) answered() {
	if l.timers.settled.Load() {
		l.drainedCheck()
	}
}

// drainedCheck closes a draining connection once it is settled (see
// connTimers) and no call or stream is left on it. It runs on the reader
// (a PONG), a handler (callEnded) or a timer, and closes on a goroutine of
// the link's.
func (l *serverLink) drainedCheck() {
	t := &l.timers
	t.mu.Lock()
	if !t.draining || t.stopped {
		t.mu.Unlock()
		return
	}
	if !t.settled.Load() && l.Pongs() > t.drainPongs {
		t.settled.Store(true)
	}
	t.mu.Unlock()
	if !l.closable() {
		return
	}
	l.GoOwned(func() {
		if l.Close(status.New(codes.Unavailable, "connection drained after GOAWAY")) {
			l.Log.Debug("closing a drained connection", zap.Stringer("peer", l.peer.Addr))
		}
	})
}

// checkIdle drains the connection once it has had no call for
// MaxConnectionIdle, else looks again when it could have.
func (l *serverLink) checkIdle() {
	limit := l.s.opts.conn.MaxConnectionIdle
	next := limit
	if !l.busy() {
		t := &l.timers
		t.mu.Lock()
		since := t.start
		t.mu.Unlock()
		if end := t.lastEnd.Load(); end != 0 {
			since = time.Unix(0, end)
		}
		idle := time.Since(since)
		if idle >= limit {
			l.drain(maxIdle)
			return
		}
		next = limit - idle
	}
	l.timers.mu.Lock()
	if !l.timers.stopped {
		l.timers.idle.Reset(next)
	}
	l.timers.mu.Unlock()
}

// drain sends GOAWAY: the client takes no new calls here and closes the
// connection once its calls end. A PING follows the GOAWAY: once its PONG
// is back (or the keepalive timeout passed without it), whatever the client
// sent before it read the GOAWAY has arrived, and the server closes the
// connection itself as soon as no call or stream is left, whether or not
// the client does. After MaxConnectionAgeGrace, if set, the server closes
// it whatever is left.
func (l *serverLink) drain(reason string) {
	t := &l.timers
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.draining {
		return // closed, or draining already
	}
	t.draining = true
	t.drainPongs = l.Pongs()
	l.Log.Debug("connection management: sending GOAWAY", zap.Stringer("peer", l.peer.Addr), zap.String("reason", reason))
	l.QueueGoAway(wire.AppendGoAway(nil, 0, reason))
	// After the GOAWAY (the flusher sends it first), to see when the
	// client has read it.
	l.QueueControl(wire.AppendPing(nil, false, 0), conn.MaxQueuedCancels)
	t.settle = timers.Default.AfterFunc(l.Keepalive().Timeout, func() {
		t.settled.Store(true)
		l.drainedCheck()
	})
	if t.idle != nil {
		t.idle.Stop()
	}
	g := l.s.opts.conn.MaxConnectionAgeGrace
	if g <= 0 {
		return
	}
	t.grace = timers.Default.AfterFunc(g, func() {
		// The GOAWAY's send may wait: not on the timer goroutine.
		l.GoOwned(func() {
			l.goAwayClose(status.Newf(codes.Unavailable, "%s: calls still running after a grace of %v", reason, g))
		})
	})
}

// stopConnTimers stops the limits' timers once the connection has ended.
func (l *serverLink) stopConnTimers() {
	t := &l.timers
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for _, tm := range []*timers.Timer{t.idle, t.age, t.grace, t.settle} {
		if tm != nil {
			tm.Stop()
		}
	}
}

// serverPingBackoff: the server said too_many_pings, so this client pings
// half as often from the next connection on, as gRPC-go's does. Called
// with cc.mu not held.
func (cc *ClientConn) serverPingBackoff() {
	cc.mu.Lock()
	ka := cc.opts.keepalive.withDefaults()
	if ka.Time > 0 {
		cc.opts.keepalive.Time = 2 * ka.Time
	}
	next := cc.opts.keepalive.Time
	cc.mu.Unlock()
	cc.log.Warn("the server says the client pings too often (too_many_pings): doubling the keepalive time", zap.Duration("time", next))
}
