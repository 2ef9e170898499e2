package transporttest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// growing is an Activity whose count grows every time it is read: a peer
// that always makes progress, however slowly the test runs.
type growing struct{ n atomic.Uint64 }

func (g *growing) BytesReceived() uint64 { return g.n.Add(1) }

type stalled struct{}

func (stalled) BytesReceived() uint64 { return 42 }

// A transfer that keeps making progress outlives many stall periods (one
// deadline for the whole transfer would end it); a stalled one is ended.
func TestWatchProgress(t *testing.T) {
	const stall = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress, cancelProgress := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchProgress(progress, cancelProgress, stall, []transport.Activity{&growing{}})
	}()
	// Sleeping here only gives the watcher time to misbehave; the test
	// passes on a machine of any speed.
	time.Sleep(10 * stall)
	if progress.Err() != nil {
		t.Fatal("a transfer that kept making progress was ended")
	}
	cancel()
	<-done

	stuck, cancelStuck := context.WithCancel(context.Background())
	defer cancelStuck()
	watchProgress(stuck, cancelStuck, stall, []transport.Activity{stalled{}})
	if stuck.Err() == nil {
		t.Fatal("watchProgress returned without ending a stalled transfer")
	}
}
