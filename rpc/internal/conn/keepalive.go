package conn

import "time"

// KeepaliveAction is what keepalive does at a wake.
type KeepaliveAction int

const (
	KeepaliveWait  KeepaliveAction = iota // sleep on
	KeepalivePing                         // send a ping, sleep for the timeout
	KeepaliveClose                        // the ping went unanswered: close
)

// KeepaliveState is keepalive's reckoning, apart from clocks and
// connections so it can be tested step by step.
type KeepaliveState struct {
	seen       uint64    // the activity count at the last wake
	lastWake   time.Time // when that was
	lastActive time.Time // no later than the peer's last sign of life
	pinged     bool      // a ping is out and nothing came since
	pingDue    time.Time // when the ping out must have been answered
}

// NewKeepaliveState starts the reckoning at now, with count the activity
// count then.
func NewKeepaliveState(count uint64, now time.Time) KeepaliveState {
	return KeepaliveState{seen: count, lastWake: now, lastActive: now}
}

// Wake takes stock at now: count is the activity count, lastFrame when the
// last whole frame arrived; a ping goes after every interval of silence,
// and the connection closes when nothing came within timeout of it. While
// a ping is out it wakes at least every interval, as gRPC-go's client does,
// so that with a timeout longer than the interval an answered ping is
// followed by the next one an interval later, not a timeout later. It
// says what to do and how long to sleep.
func (s *KeepaliveState) Wake(now time.Time, count uint64, lastFrame time.Time, interval, timeout time.Duration) (time.Duration, KeepaliveAction) {
	prev := s.lastWake
	s.lastWake = now
	if count != s.seen {
		// Something arrived since the last wake, so no earlier than it.
		s.seen, s.pinged = count, false
		s.lastActive = prev
	}
	if lastFrame.After(s.lastActive) {
		s.lastActive = lastFrame
	}
	switch {
	case s.pinged && !now.Before(s.pingDue):
		return 0, KeepaliveClose
	case s.pinged:
		return min(interval, s.pingDue.Sub(now)), KeepaliveWait
	case now.Sub(s.lastActive) >= interval:
		s.pinged, s.pingDue = true, now.Add(timeout)
		return min(interval, timeout), KeepalivePing
	}
	return s.lastActive.Add(interval).Sub(now), KeepaliveWait
}
