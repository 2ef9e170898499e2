package conformance

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/transport"
)

// DefaultTimeout is Config.Timeout when it is zero.
const DefaultTimeout = 30 * time.Second

// Config says which transport a suite runs over.
type Config struct {
	Transport transport.Transport
	// Addr is what listeners listen on, e.g. "127.0.0.1:0".
	Addr string
	// LeakOptions are passed to goleak after each test, for goroutines a
	// transport legitimately keeps beyond its connections.
	LeakOptions []goleak.Option
	// Timeout bounds every wait in a suite that should end promptly; a
	// wait that hits it is a failure (a hang), not a performance verdict.
	// Zero means DefaultTimeout.
	Timeout time.Duration
	// Light: the heaviest tests move less data, for machines that are
	// slow at it (the Soft-RoCE guest moves about 1 MB/s under -race);
	// what they assert stays the same.
	Light bool
}

// WithDefaults returns c with its zero fields that have a default set to
// it, as a suite's tests read them.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Context returns a context that ends after c.Timeout, or when the test
// ends.
func (c Config) Context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), c.WithDefaults().Timeout)
	t.Cleanup(cancel)
	return ctx
}

// A Test is one named test of a suite. (An alias of a struct literal
// type, so a suite's table can list its tests without field names.)
type Test = struct {
	Name string
	Fn   func(*testing.T)
}

// Run runs tests in order as subtests of t. Once a test's own cleanups
// have run (closing its connections and listeners), no goroutine may be
// left but those cfg.LeakOptions allow.
func Run(t *testing.T, cfg Config, tests []Test) {
	for _, tc := range tests {
		t.Run(tc.Name, func(t *testing.T) {
			// Registered first, so it runs after the test's own cleanups.
			t.Cleanup(func() { goleak.VerifyNone(t, cfg.LeakOptions...) })
			tc.Fn(t)
		})
	}
}
