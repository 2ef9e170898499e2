package rpc

import (
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/status"
)

// WithIdleTimeout makes the ClientConn go Idle after d without a call or
// stream in progress, as gRPC-go's option: it closes its resolver and its
// connections (calls in flight on them finish first), and the next call
// or Connect starts again. 0, the default, never goes idle (gRPC-go's
// default is 30 minutes; a queue pair is dearer to set up than an HTTP/2
// connection).
func WithIdleTimeout(d time.Duration) DialOption {
	return func(o *dialOptions) { o.idleTimeout = d }
}

// beginCall and endCall count the calls and streams in progress, for the
// idle timeout; without one they cost nothing.
func (cc *ClientConn) beginCall() {
	if cc.opts.idleTimeout > 0 {
		cc.active.Add(1)
	}
}

func (cc *ClientConn) endCall() {
	if cc.opts.idleTimeout > 0 {
		cc.lastEnd.Store(time.Now().UnixNano())
		cc.active.Add(-1)
	}
}

// idleCheck is the idle timeout's timer: it checks, one timeout after the
// last call ended, whether another began since. Going idle (closing the
// resolver, draining the connections) may wait, so it runs on a goroutine
// of its own, which Close waits for.
func (cc *ClientConn) idleCheck() {
	d := cc.opts.idleTimeout
	wait := d
	if cc.active.Load() == 0 {
		since := time.Since(time.Unix(0, cc.lastEnd.Load()))
		if since >= d {
			cc.mu.Lock()
			if cc.closed {
				cc.mu.Unlock()
				return
			}
			cc.wg.Add(1)
			cc.mu.Unlock()
			go func() {
				defer cc.wg.Done()
				cc.enterIdle()
				cc.idleChecks.Add(1)
				cc.idleTimer.Reset(d)
			}()
			return
		}
		wait = d - since
	}
	cc.idleChecks.Add(1)
	cc.idleTimer.Reset(wait)
}

// enterIdle closes the resolver and the backends, unless a call began.
// A call that begins meanwhile waits for cc.mu, then starts them again.
func (cc *ClientConn) enterIdle() {
	cc.mu.Lock()
	if cc.closed || !cc.started || cc.active.Load() != 0 {
		cc.mu.Unlock()
		return
	}
	cc.gen++
	cc.started = false
	cc.exited.Store(false)
	r := cc.res
	cc.res, cc.buildErr = nil, nil
	cc.bal.closeLocked()
	cc.bal = nil
	var drain []*clientLink
	for _, s := range cc.subs {
		if l := s.shutdownLocked(); l != nil {
			drain = append(drain, l)
		}
	}
	cc.subs, cc.picker = nil, nil
	cc.setStateLocked(connectivity.Idle)
	cc.mu.Unlock()
	cc.log.Debug("idle: closing the connections until the next call")
	if r != nil {
		r.Close()
	}
	for _, l := range drain {
		l.drain(status.New(codes.Unavailable, "client connection idle"))
	}
}
