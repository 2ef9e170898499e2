package accept

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Log is a listener's logger: replaceable while the listener runs (the RPC
// server hands over its own), with a rate limit on the lines a remote peer
// can cause, so a flood of bad peers cannot flood the log.
type Log struct {
	name     string
	p        atomic.Pointer[zap.Logger]
	refusals Limiter
	accepts  Limiter
}

// NewLog returns a Log writing to log (zap.NewNop() when nil), named name.
func NewLog(log *zap.Logger, name string) *Log {
	l := &Log{name: name}
	l.refusals.init()
	l.accepts.init()
	l.Set(log)
	return l
}

// Set makes log (named as the Log is) receive the lines from now on.
func (l *Log) Set(log *zap.Logger) {
	if log == nil {
		log = zap.NewNop()
	}
	if l.name != "" {
		log = log.Named(l.name)
	}
	l.p.Store(log)
}

// Logger is the current logger.
func (l *Log) Logger() *zap.Logger { return l.p.Load() }

// Refused logs, rate-limited, one line about a peer whose connection was
// refused or closed for what it sent.
func (l *Log) Refused(msg string, fields ...zap.Field) {
	l.refusals.Warn(l.Logger(), msg, fields...)
}

func (l *Log) acceptFailed(msg string, fields ...zap.Field) {
	l.accepts.Warn(l.Logger(), msg, fields...)
}

// Limiter passes a burst of lines, then about one per second; the next line
// that passes after some were held back carries their count ("suppressed").
// Its zero value must be initialised by init; NewLog does that.
type Limiter struct {
	mu         sync.Mutex
	now        func() time.Time
	burst      float64
	perSecond  float64
	tokens     float64
	last       time.Time
	suppressed int
}

const (
	logBurst     = 10
	logPerSecond = 1
)

func (r *Limiter) init() {
	r.now = time.Now
	r.burst = logBurst
	r.perSecond = logPerSecond
	r.tokens = logBurst
}

// allow reports whether a line may go out now and, if so, how many were
// held back since the last one that went out.
func (r *Limiter) allow() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !r.last.IsZero() {
		r.tokens = min(r.burst, r.tokens+now.Sub(r.last).Seconds()*r.perSecond)
	}
	r.last = now
	if r.tokens < 1 {
		r.suppressed++
		return false, 0
	}
	r.tokens--
	n := r.suppressed
	r.suppressed = 0
	return true, n
}

// Warn writes msg at warn level to log unless the rate limit holds it back.
func (r *Limiter) Warn(log *zap.Logger, msg string, fields ...zap.Field) {
	ce := log.Check(zap.WarnLevel, msg)
	if ce == nil {
		return
	}
	ok, n := r.allow()
	if !ok {
		return
	}
	if n > 0 {
		fields = append(fields, zap.Int("suppressed", n))
	}
	ce.Write(fields...)
}
