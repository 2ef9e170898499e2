package rpc

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// How many lines a server's peers can make it log: a burst, then one line
// per interval. A flood of bad requests costs a few lines a second and a
// count of what was left out.
const (
	peerLogBurst = 20
	peerLogEvery = 100 * time.Millisecond
)

// limitedLogger logs through a token bucket; lines over the rate are
// dropped and counted, and the next line that passes says how many.
type limitedLogger struct {
	log   *zap.Logger
	burst int
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	tokens  int
	last    time.Time // when tokens were last refilled
	dropped int
}

func newLimitedLogger(log *zap.Logger, burst int, every time.Duration, now func() time.Time) *limitedLogger {
	return &limitedLogger{log: log, burst: burst, every: every, now: now, tokens: burst, last: now()}
}

// allow takes a token; it returns whether a line may be logged and how
// many were dropped since the last one that was.
func (r *limitedLogger) allow() (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if n := int(now.Sub(r.last) / r.every); n > 0 {
		r.tokens = min(r.burst, r.tokens+n)
		r.last = r.last.Add(time.Duration(n) * r.every)
	}
	if r.tokens == 0 {
		r.dropped++
		return false, 0
	}
	r.tokens--
	d := r.dropped
	r.dropped = 0
	return true, d
}

func (r *limitedLogger) warn(msg string, fields ...zap.Field) {
	if r.log.Core().Enabled(zap.WarnLevel) {
		if ok, dropped := r.allow(); ok {
			if dropped > 0 {
				fields = append(fields, zap.Int("suppressed_lines", dropped))
			}
			r.log.Warn(msg, fields...)
		}
	}
}
