package rdma

import (
	"context"
	"testing"
	"time"
)

// TestTryReplyCarriesCredit: over shared receive queues with the
// guaranteed window of 1 (an idle RPC connection's keepalive), a message
// answered with TryReply returns its credit on the answer: the answering
// side sends no credit-only message, and the asker's credit is back, so it
// can ask again. TrySend sends at once while a credit is there and
// reports false, sending nothing, once none is.
func TestTryReplyCarriesCredit(t *testing.T) {
	ip := guestIP(t)
	o := Options{Receive: ReceiveShared}
	cliTr, srvTr := New(o), New(o)
	client, server := dialPair(t, cliTr, srvTr, ip)
	g := client.o.SharedCredits
	window := func(c *conn) (max, avail int) { c.mu.Lock(); defer c.mu.Unlock(); return c.win.Max(), c.win.Avail() }
	// A fresh window starts lent to: wait for both to come down to the
	// guaranteed one (both sides idle).
	if !eventually(time.Minute, func() bool {
		cm, ca := window(client)
		sm, sa := window(server)
		return cm == g && ca == g && sm == g && sa == g
	}) {
		t.Fatalf("the windows did not come down to %d in a minute of idleness", g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	creditOnly, lent := srvTr.Counters()["credit_only_sent"], srvTr.Counters()["credits_lent"]
	const rounds = 3
	for i := range rounds {
		if i > 0 {
			// Idle between rounds for longer than the give-back delay, as
			// keepalive's rounds are: a peer that uses its window up twice
			// within it is lent to, and the lend's give-back costs a
			// credit return of its own (TestNoLendToIdlePeer). The sleep
			// is a lower bound: the rounds are at least that far apart
			// however slow the machine.
			time.Sleep(3 * giveBackIdle)
		}
		// The asker's window is full again: its credit came back on
		// the answer (or a credit return), not a lend.
		if !eventually(time.Minute, func() bool { _, a := window(client); return a == g }) {
			t.Fatalf("round %d: the client's credit never came back", i)
		}
		if sent, err := client.TrySend([]byte("ping")); !sent || err != nil {
			t.Fatalf("round %d: TrySend with a credit: sent %v, %v", i, sent, err)
		}
		if g == 1 {
			if sent, err := client.TrySend([]byte("ping")); sent || err != nil {
				t.Fatalf("round %d: TrySend with no credit left: sent %v, %v; want false, nil", i, sent, err)
			}
		}
		b, err := server.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sent, err := server.TryReply(b, []byte("pong")); !sent || err != nil {
			t.Fatalf("round %d: TryReply: sent %v, %v", i, sent, err)
		}
		r, err := client.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Bytes()) != "pong" {
			t.Fatalf("round %d: got %q, want pong", i, r.Bytes())
		}
		r.Release()
	}
	if !eventually(time.Minute, func() bool { _, a := window(client); return a == g }) {
		t.Fatal("the client's last credit never came back")
	}
	if n, l := srvTr.Counters()["credit_only_sent"]-creditOnly, srvTr.Counters()["credits_lent"]-lent; n != 0 {
		t.Errorf("the answering side sent %d credit-only messages for %d answered messages (%d credits lent meanwhile), want 0", n, rounds, l)
	}
}
