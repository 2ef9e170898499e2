package transporttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// progressCtx is the context of a test that moves many bytes: it ends only
// when none of conns has received a byte for the suite's Timeout (a hang),
// however long the whole transfer takes on a slow or loaded machine. It
// watches transport.Activity; when a conn does not implement it, the
// context is an ordinary Timeout.
func (s *suite) progressCtx(t *testing.T, conns ...transport.Conn) context.Context {
	var acts []transport.Activity
	for _, c := range conns {
		a, ok := c.(transport.Activity)
		if !ok {
			return s.ctx(t)
		}
		acts = append(acts, a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchProgress(ctx, cancel, s.cfg.Timeout, acts)
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ctx
}

// watchProgress cancels when the bytes received over acts stay the same for
// stall; it returns when ctx ends.
func watchProgress(ctx context.Context, cancel context.CancelFunc, stall time.Duration, acts []transport.Activity) {
	total := func() (n uint64) {
		for _, a := range acts {
			n += a.BytesReceived()
		}
		return n
	}
	tick := time.NewTicker(max(stall/10, time.Millisecond))
	defer tick.Stop()
	last, since := total(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n := total(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= stall {
			cancel()
			return
		}
	}
}
