package rdma

import (
	"context"
	"testing"
	"time"
)

// TestNoLendToIdlePeer: over shared receive queues, a peer that sends one
// message now and then (as an idle RPC connection's keepalive does) is not
// lent to, so it has nothing to give back: each message costs its credit
// return and nothing more. A busy peer is still lent to (TestSharedRPC,
// TestSharedPoolIdle).
func TestNoLendToIdlePeer(t *testing.T) {
	ip := guestIP(t)
	o := Options{Receive: ReceiveShared}
	cliTr, srvTr := New(o), New(o)
	client, server := dialPair(t, cliTr, srvTr, ip)
	g := client.o.SharedCredits
	window := func() int { client.mu.Lock(); defer client.mu.Unlock(); return client.win.Max() }
	// A fresh window starts full, lent from the start: wait for it to be
	// given back (the client idles) before watching.
	if !eventually(time.Minute, func() bool { return window() == g }) {
		t.Fatalf("the client's window is %d after a minute of idleness, want %d", window(), g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lent := srvTr.Counters()["credits_lent"]
	const messages = 3
	for i := range messages {
		if i > 0 {
			// Idle between messages for longer than the give-back delay.
			// The sleep is a lower bound, and the last message's use of
			// the window was recorded before Recv returned it, so the two
			// uses are at least that far apart however slow the machine.
			time.Sleep(3 * giveBackIdle)
		}
		if err := client.Send(ctx, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		b, err := server.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	// The last credit's return, once it is back.
	if !eventually(time.Minute, func() bool { client.mu.Lock(); defer client.mu.Unlock(); return client.win.Avail() == g }) {
		t.Fatal("the client's credit never came back")
	}
	if n := srvTr.Counters()["credits_lent"] - lent; n != 0 {
		t.Errorf("%d credits lent to a peer that sent %d messages %v apart", n, messages, 3*giveBackIdle)
	}
	if w := window(); w != g {
		t.Errorf("the client's window is %d, want the guaranteed %d", w, g)
	}
}
