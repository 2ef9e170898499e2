package rdma

import (
	"context"
	"testing"
	"time"
)

// TestAskAnswerTakesNoCredit (guest): a message sent by TryAsk from a side
// that receives into a shared pool, answered by TryReply, is a round of
// two messages and nothing else: the answer takes no credit, so neither
// side sends a credit-only message (without asks the asker returned the
// answer's credit in one of its own, every round: bench/results/scale.md's
// 1.35 per connection); the buffer the ask set aside goes back to the
// pool. Against a peer that does not know asks (an old hello), TryAsk is
// a TrySend and the round works as before.
func TestAskAnswerTakesNoCredit(t *testing.T) {
	ip := guestIP(t)
	for _, tc := range []struct {
		name    string
		srv     Options
		old     bool // the server predates asks
		answers bool
	}{
		{"shared", Options{Receive: ReceiveShared}, false, true},
		{"server per connection", Options{Receive: ReceivePerConnection}, false, true},
		{"old server", Options{Receive: ReceiveShared}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cliTr, srvTr := New(Options{Receive: ReceiveShared}), New(tc.srv)
			srvTr.noAsks = tc.old
			client, server := dialPair(t, cliTr, srvTr, ip)
			if client.answers != tc.answers {
				t.Fatalf("asks negotiated: %v, want %v", client.answers, tc.answers)
			}
			full := func(c *conn) bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.win.Avail() == c.win.Max() && c.win.Max() == c.peer.keep()
			}
			// A fresh window starts lent to: wait for both to come down to
			// the guaranteed one (both sides idle).
			if !eventually(time.Minute, func() bool { return full(client) && full(server) }) {
				t.Fatal("the windows did not come down to the guaranteed ones in a minute of idleness")
			}
			_, committed, _ := poolState(cliTr)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cliOnly, srvOnly := cliTr.Counters()["credit_only_sent"], srvTr.Counters()["credit_only_sent"]
			const rounds = 3
			for i := range rounds {
				if i > 0 {
					// Idle between rounds for longer than the give-back
					// delay, as keepalive's rounds are (see
					// TestTryReplyCarriesCredit); a lower bound only.
					time.Sleep(3 * giveBackIdle)
				}
				if sent, err := client.TryAsk([]byte("ping")); !sent || err != nil {
					t.Fatalf("round %d: TryAsk: sent %v, %v", i, sent, err)
				}
				client.rmu.Lock()
				asked := client.asked
				client.rmu.Unlock()
				if asked != tc.answers {
					t.Fatalf("round %d: a buffer set aside for the answer: %v, want %v", i, asked, tc.answers)
				}
				b, err := server.Recv(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if sent, err := server.TryReply(b, []byte("pong")); !sent || err != nil {
					t.Fatalf("round %d: TryReply: sent %v, %v", i, sent, err)
				}
				if tc.answers && !full(server) {
					t.Fatalf("round %d: the answer took a credit of the answerer's window", i)
				}
				r, err := client.Recv(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(r.Bytes()) != "pong" {
					t.Fatalf("round %d: got %q, want pong", i, r.Bytes())
				}
				r.Release()
				// The answerer's credit comes back (without asks, in the
				// asker's credit-only message). The asker's own may wait
				// in a batch at a server receiving per connection, which
				// returns credits by half its window.
				if !eventually(time.Minute, func() bool { return full(server) }) {
					t.Fatalf("round %d: the answerer's window did not come back", i)
				}
			}
			if _, c, _ := poolState(cliTr); c != committed {
				t.Errorf("the client's pool has %d buffers committed after the rounds, %d before", c, committed)
			}
			// Without asks the asker returns each answer's credit in a
			// message of its own: what asks save.
			want := uint64(0)
			if !tc.answers {
				want = rounds
			}
			if n, m := cliTr.Counters()["credit_only_sent"]-cliOnly, srvTr.Counters()["credit_only_sent"]-srvOnly; n != want || m != 0 {
				t.Errorf("%d asks answered: the asker sent %d credit-only messages, the answerer %d; want %d and 0", rounds, n, m, want)
			}
		})
	}
}

// TestAskUnansweredAtClose (guest): an ask the peer never answers keeps
// its buffer set aside until the connection goes, and then gives it back:
// the pool's commitments all come back.
func TestAskUnansweredAtClose(t *testing.T) {
	ip := guestIP(t)
	cliTr, srvTr := New(Options{Receive: ReceiveShared}), New(Options{Receive: ReceiveShared})
	client, server := dialPair(t, cliTr, srvTr, ip)
	if sent, err := client.TryAsk([]byte("ping")); !sent || err != nil {
		t.Fatalf("TryAsk: sent %v, %v", sent, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := server.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Release() // no answer
	client.rmu.Lock()
	asked := client.asked
	client.rmu.Unlock()
	if !asked {
		t.Fatal("no buffer set aside for the answer")
	}
	// One ask at a time: the next goes as a plain message.
	if sent, err := client.TryAsk([]byte("again")); err != nil {
		t.Fatal(err)
	} else if sent {
		if b, err = server.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		b.Release()
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	if !eventually(time.Minute, func() bool { _, c, _ := poolState(cliTr); return c == 0 }) {
		_, c, _ := poolState(cliTr)
		t.Fatalf("%d buffers still committed in the client's pool after its only connection closed, want 0", c)
	}
}
