package rpc

import (
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/resolver"
)

// Failover and switch-back (docs/rdma.md, "Failover to TCP and back").
//
// A backend whose target's transport has a fallback (WithFallback, auto://)
// keeps calls going when its link over the target's own transport fails
// while it takes calls (the RDMA port went down, the device was removed,
// the queue pair went to error: the transport closed the connection, or
// keepalive gave it up): the backend does not go Idle but reconnects at
// once, over the fallback transport to the same address, without a
// backoff wait, so calls not yet sent wait for that link and go there
// (the calls the link had not taken are sent again on the next link, as
// for any lost link; calls in flight fail Unavailable unless their retry
// policy retries them). While a backend runs over the fallback a probe
// dials the target's own transport again, with the connect backoff
// between attempts; the first attempt that connects becomes the link new
// calls take, and the fallback link drains (its calls finish). One log
// line each way (Warn to the fallback, Info back), and a Debug line per
// failed probe.
//
// A link that drained or closed on purpose (GOAWAY, the resolver removed
// its address, idleness) is not a failure: the backend goes Idle as
// without a fallback.

// via says how a link was dialed.
type via int

const (
	viaOnly     via = iota // its transport has no fallback
	viaPrimary             // the target's own transport, which has a fallback
	viaFallback            // the fallback transport
)

// failed reports whether l ended, or is ending, by failure rather than on
// purpose: it is not draining and its connection closed (gone: its reader
// ended). Called without cc.mu.
func (l *clientLink) failed(gone bool) bool {
	l.mu.Lock()
	draining := l.draining
	l.mu.Unlock()
	if draining {
		return false
	}
	if gone || l.Ctx.Err() != nil {
		return true
	}
	select {
	case <-l.Conn.Done():
		return true
	default:
		return false
	}
}

// lostLocked takes cur, which stops taking calls, out of use: the backend
// goes Idle, or when cur failed over the target's own transport and a
// fallback is configured, it reconnects over the fallback at once. It
// reports whether the backend lost its link (it is not shut down).
func (s *subConn) lostLocked(failed bool) bool {
	how, addr := s.curVia, s.curAddr
	s.dropLinkLocked()
	if s.shutdown {
		return false
	}
	s.state = connectivity.Idle
	if !failed || how != viaPrimary {
		s.reportLocked()
		return true
	}
	s.fallBackLocked(addr)
	s.failures = 0
	s.cc.log.Warn("connection failed: reconnecting over the fallback transport; the target's own transport is probed with backoff",
		zap.String("addr", addr.Addr))
	s.connectLocked()
	return true
}

// probe dials the target's own transport while the backend's link runs
// over the fallback, after the connect backoff's delay, growing from
// attempt to attempt, to the link's address. The first dial that connects
// replaces the fallback link, which drains. It ends then, when the backend
// has no fallback link (a later one starts a probe of its own), or at
// shutdown; it follows a fallback link that replaced the one it started
// with.
func (s *subConn) probe() {
	cc := s.cc
	defer cc.wg.Done()
	for attempt := 1; ; attempt++ {
		fb, _ := s.probeTarget()
		if fb == nil {
			return
		}
		t := time.NewTimer(cc.connect.Backoff.Delay(attempt))
		select {
		case <-t.C:
		case <-fb.Ctx.Done():
			t.Stop()
		case <-s.ctx.Done():
			t.Stop()
		}
		fb, a := s.probeTarget()
		if fb == nil {
			return
		}
		timeout := max(cc.connect.MinConnectTimeout, cc.connect.Backoff.Delay(attempt+1))
		tc, set, _, err := s.dialOne(s.ctx, a, timeout, true)
		if err != nil {
			cc.log.Debug("probe of the target's own transport failed", zap.String("addr", a.Addr), zap.Int("attempt", attempt), zap.Error(err))
			continue
		}
		cc.mu.Lock()
		if s.shutdown || s.cur != fb {
			// The link changed while the probe dialed: start over
			// from the one there is now, if it runs over the fallback.
			cc.mu.Unlock()
			tc.Close()
			continue
		}
		old := s.dropLinkLocked()
		delete(s.fellBack, a.Addr)
		s.probing = false
		cc.drainLocked(old, "switched back to the target's own transport")
		cc.log.Info("the target's own transport works again: new calls go over it; the fallback connection drains",
			zap.String("addr", a.Addr), zap.Int("probes", attempt))
		s.installLocked(tc, set, a, viaPrimary) // unlocks cc.mu
		return
	}
}

// probeTarget returns the link the probe is for and its address: the
// backend's link, when it runs over the fallback. Otherwise (no link, one
// over the target's own transport, shutdown) the probe ends: it returns
// nil and the backend's next fallback link starts a new probe. Checking
// and ending under cc.mu, as installLocked decides whether to start one,
// leaves no fallback link without a probe.
func (s *subConn) probeTarget() (*clientLink, resolver.Address) {
	s.cc.mu.Lock()
	defer s.cc.mu.Unlock()
	if s.shutdown || s.cur == nil || s.curVia != viaFallback {
		s.probing = false
		return nil, resolver.Address{}
	}
	return s.cur, s.curAddr
}
