package loadgen

import (
	"context"
	"sync"
	"time"
)

// Clock is the time the pacer keeps; tests give a fake one.
type Clock interface {
	Now() time.Time
	// SleepUntil waits until t, or until ctx ends (then returns its
	// error). A t already past returns at once.
	SleepUntil(ctx context.Context, t time.Time) error
}

// SystemClock is the real clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }

func (SystemClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pacer spaces calls at a fixed rate across all the workers that share it:
// the k-th call may start at start + k/rate. A worker that falls behind
// (the calls are slower than the rate) starts at once, without catching up
// in a burst beyond one interval's slack: the schedule moves forward to
// now, so a stall is not followed by a burst that would measure the queue
// instead of the server.
type Pacer struct {
	clock    Clock
	interval time.Duration

	mu   sync.Mutex
	next time.Time // when the next call may start
}

// NewPacer paces at rate calls per second on clock.
func NewPacer(rate float64, clock Clock) *Pacer {
	return &Pacer{clock: clock, interval: time.Duration(float64(time.Second) / rate)}
}

// Wait returns when the caller may start its call, or with ctx's error.
func (p *Pacer) Wait(ctx context.Context) error {
	now := p.clock.Now()
	p.mu.Lock()
	if p.next.IsZero() || p.next.Before(now.Add(-p.interval)) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(p.interval)
	p.mu.Unlock()
	return p.clock.SleepUntil(ctx, at)
}
