package rdma

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/transport"
)

// waitFor polls cond until it holds or a generous deadline passes (a guard
// against a hang, not a measure of speed: 30 s was not generous enough for
// TestHandshakeFlood in a guest starved by a loaded host, load average 8 on
// 2 cores).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !eventually(2*time.Minute, cond) {
		t.Fatalf("gave up waiting: %s", what)
	}
}

// eventually polls cond for up to guard (a hang guard, not a measure of
// speed) and reports whether it held.
func eventually(guard time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestCloseDropsLateReceive: a message that completes after the teardown's
// last poll but before the QP goes to ERR is found by the final drain,
// after a local Close dropped the receive queue. It must not be handed up
// (nobody can Recv it any more): once both sides are closed, nothing is
// lent and nothing is left registered.
func TestCloseDropsLateReceive(t *testing.T) {
	ip := guestIP(t)
	core, logs := observer.New(zap.DebugLevel)
	tr := New(Options{Logger: zap.New(core), BufferSize: 4096, RecvBuffers: 4, SendSlots: 4,
		CloseGrace: 2 * time.Minute}) // the final drain must not be cut short by a slow machine
	client, server, _ := pair(t, tr, ip)

	var hookErr error
	hookRan := false
	// Runs on the client's poller, in its teardown, between the last poll
	// and moving the QP to ERR: the server sends a whole message, and once
	// its send completed (the client's receive was acknowledged, so its
	// completion is on the client's CQ) the teardown goes on.
	client.beforeERR = func() {
		hookRan = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if hookErr = server.Send(ctx, []byte("late")); hookErr != nil {
			return
		}
		for server.pendingSends() {
			if ctx.Err() != nil {
				hookErr = errors.New("the server's send never completed")
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	client.Close()
	if !hookRan {
		t.Fatal("the teardown did not run the hook")
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if _, err := client.Recv(context.Background()); err == nil {
		t.Fatal("Recv after a local Close returned a message")
	}
	server.Close()
	// The late message was really found by the final drain (the window was
	// exercised) and dropped there. On a shared CQ (both ends share it here)
	// there is no final drain of the connection's own: whoever polls
	// delivers the late message to the closing connection, whose teardown
	// then drops it from the queue, or after ERR drops it on arrival.
	if n := logs.FilterMessage("dropping a message received while closing").Len(); isOwn(client) && n != 1 {
		t.Errorf("%d late messages dropped in the teardown, want 1", n)
	}
	waitFor(t, "lent buffers back to zero", func() bool { return client.lentBufs.Load() == 0 })
	waitFor(t, "registered bytes back to zero", func() bool { return tr.Gauges()["registered_bytes"] == 0 })
}

// TestPeerDeathReturnsQueued: messages that arrived before the peer died
// are still received after it, and the ones never received are given back
// by Close: nothing stays lent, nothing registered. Before, they stayed
// lent until a Recv that a closed connection never gets.
func TestPeerDeathReturnsQueued(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{BufferSize: 4096, RecvBuffers: 4, SendSlots: 4})
	client, server, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	for i := range n {
		if err := client.Send(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the messages delivered", func() bool { return server.lentBufs.Load() == n })
	client.Close() // the peer goes away: the server's teardown runs on its own
	waitFor(t, "the server's teardown", func() bool { return server.torndown.Load() })
	b, err := server.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv of a message that arrived before the peer died: %v", err)
	}
	if len(b.Bytes()) != 1 || b.Bytes()[0] != 0 {
		t.Fatalf("Recv returned %v, want the first message", b.Bytes())
	}
	b.Release()
	if got := server.lentBufs.Load(); got != n-1 {
		t.Fatalf("%d buffers lent with %d messages unreceived", got, n-1)
	}
	server.Close()
	if got := server.lentBufs.Load(); got != 0 {
		t.Errorf("%d buffers still lent after Close", got)
	}
	if _, err := server.Recv(ctx); err == nil {
		t.Error("Recv after Close returned a message")
	}
	waitFor(t, "registered bytes back to zero", func() bool { return tr.Gauges()["registered_bytes"] == 0 })
}

// TestCloseReleaseAfterERR: a received message the user releases while its
// connection is being torn down (here right after the QP went to ERR) is
// not posted again on the connection's own receive queue: rxe flushes a
// receive queue when its QP enters ERR, not a receive posted after, which
// never completes, so the teardown waited out its whole close grace for
// it (close_grace_expired counts such a teardown). Per-connection
// receives and completions.
func TestCloseReleaseAfterERR(t *testing.T) {
	ip := guestIP(t)
	// A grace no slow machine runs out: what is asserted is that the
	// teardown does not wait for it (close_grace_expired), not how long.
	tr := New(Options{Completions: CompletionsPerConnection, Receive: ReceivePerConnection,
		BufferSize: 4096, RecvBuffers: 4, SendSlots: 4, CloseGrace: time.Minute})
	client, server, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Send(ctx, []byte("held")); err != nil {
		t.Fatal(err)
	}
	b, err := server.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hookRan := false
	release := func() { hookRan = true; b.Release() }
	server.afterERR.Store(&release)
	client.Close() // the peer goes: the server's teardown runs on its own
	waitFor(t, "the server's teardown", func() bool { return server.torndown.Load() })
	server.Close()
	if !hookRan {
		t.Fatal("the teardown did not run the hook")
	}
	if n := server.recvOutstanding.Load(); n != 0 {
		t.Errorf("%d receives outstanding after the teardown", n)
	}
	if n := tr.Counters()["close_grace_expired"]; n != 0 {
		t.Errorf("%d teardowns waited out their close grace", n)
	}
	waitFor(t, "registered bytes back to zero", func() bool { return tr.Gauges()["registered_bytes"] == 0 })
}

// TestCloseAfterPeerGone: a local Close whose peer closed first (its
// bootstrap connection ended, its QP went to ERR) does not wait for its
// posted sends, which nothing acknowledges any more: rxe took longer than
// a 30 s grace to fail them. Here the Close comes after the client's
// watcher saw the end and before it failed the connection, with a send
// posted just then; the teardown moves the QP to ERR at once and the send
// is flushed, not failed by retries nor waited for until the grace ran
// out. Per-connection receives and completions.
func TestCloseAfterPeerGone(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{Completions: CompletionsPerConnection, Receive: ReceivePerConnection,
		BufferSize: 4096, RecvBuffers: 4, SendSlots: 4, CloseGrace: time.Minute})
	client, server, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hookErr error
	closed := make(chan struct{})
	hook := func() {
		// The peer is gone: nothing acknowledges this send.
		if hookErr = client.Send(ctx, []byte("unanswered")); hookErr != nil {
			close(closed)
			return
		}
		go func() {
			client.Close()
			close(closed)
		}()
		// The local Close wins: the watcher will not fail the connection.
		for !client.sig.IsSet() {
			runtime.Gosched()
		}
	}
	client.peerGoneHook.Store(&hook)
	server.Close()
	<-closed
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	for k, v := range tr.Counters() {
		if (strings.HasPrefix(k, "wc_error_") || k == "close_grace_expired") && v != 0 {
			t.Errorf("%s %d, want 0", k, v)
		}
	}
	waitFor(t, "registered bytes back to zero", func() bool { return tr.Gauges()["registered_bytes"] == 0 })
}

// TestCloseWhileFillingSlot: the peer closes after a Send reserved a send
// slot and before it copies the message into it; the teardown runs to its
// end meanwhile, freeing the send memory. The Send must fail with the close
// and not copy into freed memory (the guest's conformance suite died once
// with SIGSEGV in sendMessage's copy, CloseUnblocksSend/peer), and the
// registered memory is all given back. Private send slots: the teardown
// frees them, not a shared arena that outlives the connection.
func TestCloseWhileFillingSlot(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{Completions: CompletionsPerConnection, Receive: ReceivePerConnection,
		BufferSize: 4096, RecvBuffers: 4, SendSlots: 4, PrivateSendSlots: true, CloseGrace: time.Minute})
	client, server, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := false
	hook := func() {
		if ran {
			return
		}
		ran = true
		server.Close()
		<-client.closed // the client's teardown is over: its memory is gone
	}
	client.beforeFill.Store(&hook)
	err := client.Send(ctx, make([]byte, 64<<10)) // fragments: the copy is large
	if !ran {
		t.Fatal("the hook did not run")
	}
	if !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after the teardown freed its slot: %v, want ErrClosed", err)
	}
	client.Close()
	waitFor(t, "registered bytes back to zero", func() bool { return tr.Gauges()["registered_bytes"] == 0 })
}

// isOwn reports whether c has the per-connection completion layout.
func isOwn(c *conn) bool {
	_, ok := c.cqs.(*ownCQ)
	return ok
}
