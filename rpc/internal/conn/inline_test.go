package conn

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// tryConn is a connection that can always send at once
// (transport.TrySender, transport.Replier); it counts the frames sent each
// way by kind, the buffers released by TryReply, and the asks.
type tryConn struct {
	transport.Conn      // nil: a method not defined here is not expected
	tried, sent         [16]atomic.Int64
	replies, replyFrees atomic.Int64
	asks                atomic.Int64
}

func (c *tryConn) TryAsk(msg []byte) (bool, error) {
	c.asks.Add(1)
	return c.TrySend(msg)
}

func (c *tryConn) TryReply(b transport.Buffer, msg []byte) (bool, error) {
	c.replies.Add(1)
	before := frees.Load()
	b.Release()
	c.replyFrees.Add(frees.Load() - before)
	return c.TrySend(msg)
}

// frees counts the releases of countedBuf's buffers.
var frees atomic.Int64

type countedBuf struct{}

func (*countedBuf) ReleaseBuffer(uint64, []byte) { frees.Add(1) }

func (c *tryConn) TrySend(msg []byte) (bool, error) {
	c.tried[msg[1]].Add(1)
	return true, nil
}

func (c *tryConn) Send(_ context.Context, msg []byte) error {
	c.sent[msg[1]].Add(1)
	return nil
}

func (c *tryConn) Close() error { return nil }

// TestKeepaliveRoundInline: over a transport that can send at once, a PING
// is answered and keepalive's own PING goes from the goroutine that has it
// (the reader, the timer's): no flusher goroutine, no context, nothing
// allocated. An idle connection's keepalive round was a goroutine and ~14
// allocations per side (bench/results/scale.md).
func TestKeepaliveRoundInline(t *testing.T) {
	tc := &tryConn{}
	l := NewLink(tc, LinkConfig{Log: zap.NewNop(), Keepalive: Keepalive{Time: time.Hour, Timeout: time.Hour}})
	defer l.Wait()
	defer l.Close(status.New(codes.Canceled, "test over"))

	ping := wire.AppendPing(nil, false, 1)
	h, body, err := wire.ParseHeader(ping)
	if err != nil {
		t.Fatal(err)
	}
	const runs = 100
	owner := &countedBuf{}
	frees0 := frees.Load()
	allocs := testing.AllocsPerRun(runs, func() {
		if _, err := l.Control(h, body, transport.NewBuffer(ping, owner, 0), "client", "servers"); err != nil {
			t.Fatal(err)
		}
	})
	l.Wait() // a flusher, had one started
	if got, flushed := tc.tried[wire.KindPong].Load(), tc.sent[wire.KindPong].Load(); got != runs+1 || flushed != 0 {
		t.Errorf("%d PINGs answered by %d PONGs sent at once and %d by the flusher, want all at once", runs+1, got, flushed)
	}
	// Each PING's buffer released once, by TryReply: what it held goes
	// back on the PONG.
	if n, r, rf := frees.Load()-frees0, tc.replies.Load(), tc.replyFrees.Load(); n != runs+1 || r != runs+1 || rf != runs+1 {
		t.Errorf("%d PINGs: %d buffers released, %d PONGs sent by TryReply releasing %d, want %d of each", runs+1, n, r, rf, runs+1)
	}
	if allocs != 0 {
		t.Errorf("answering a PING allocated %.1f times, want 0", allocs)
	}

	// Keepalive's wake after Time of silence: a PING.
	old := time.Now().Add(-2 * time.Hour)
	allocs = testing.AllocsPerRun(runs, func() {
		l.kaState = NewKeepaliveState(l.alive(), old)
		l.lastFrame.Store(old.UnixNano())
		l.keepaliveWake()
	})
	l.Wait()
	if got, flushed := tc.tried[wire.KindPing].Load(), tc.sent[wire.KindPing].Load(); got != runs+1 || flushed != 0 {
		t.Errorf("%d keepalive wakes sent %d PINGs at once and %d by the flusher, want all at once", runs+1, got, flushed)
	}
	// Each as an ask: the PONG that answers it may come into room the
	// transport set aside, returning nothing.
	if n := tc.asks.Load(); n != runs+1 {
		t.Errorf("%d keepalive PINGs sent by TryAsk %d times, want every one", runs+1, n)
	}
	if allocs != 0 {
		t.Errorf("keepalive's PING allocated %.1f times, want 0", allocs)
	}
}
