package backoff

import (
	"math/rand/v2"
	"time"
)

// Config is an exponential backoff with jitter.
type Config struct {
	// BaseDelay is the delay after the first failure.
	BaseDelay time.Duration
	// Multiplier grows the delay after each further failure.
	Multiplier float64
	// Jitter randomizes each delay by up to this fraction either way.
	Jitter float64
	// MaxDelay caps the delay before jitter.
	MaxDelay time.Duration
}

// DefaultConfig is gRPC's connection backoff.
var DefaultConfig = Config{
	BaseDelay:  1.0 * time.Second,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   120 * time.Second,
}

// Delay is how long to wait after the given number of consecutive failures
// (1 for the first).
func (c Config) Delay(failures int) time.Duration {
	if c.BaseDelay <= 0 {
		c = DefaultConfig
	}
	if failures < 1 {
		failures = 1
	}
	d := float64(c.BaseDelay)
	for i := 1; i < failures && d < float64(c.MaxDelay); i++ {
		d *= c.Multiplier
	}
	if c.MaxDelay > 0 && d > float64(c.MaxDelay) {
		d = float64(c.MaxDelay)
	}
	d *= 1 + c.Jitter*(2*rand.Float64()-1)
	return time.Duration(max(d, 0))
}
