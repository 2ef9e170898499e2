package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// testArena is a shared arena in plain memory: chunks of 2 slots of 8
// bytes, the first taken from b at once, more while b allows.
func testArena(t *testing.T, b *budget) *arena {
	grow := func(n int) (*verbs.MR, []byte, error) {
		if err := b.take(int64(n)); err != nil {
			return nil, nil, err
		}
		return nil, make([]byte, n), nil
	}
	mr, mem, err := grow(16)
	if err != nil {
		t.Fatal(err)
	}
	return newArena(8, 2, mr, mem, grow)
}

// woken reports whether w received a wake.
func woken(w chan struct{}) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}

// TestArenaGrowsWithinBudget: the arena grows a chunk at a time while the
// budget allows and then makes senders wait, its slots are distinct memory,
// a lend never takes the last free slot, and slots given back wake the
// waiters one at a time, the longest waiting first.
func TestArenaGrowsWithinBudget(t *testing.T) {
	b := &budget{limit: 32} // two chunks
	a := testArena(t, b)
	var held []int32
	take := func(wantLast bool) {
		t.Helper()
		id, last, w := a.take()
		if w != nil {
			t.Fatalf("take waits with %d of %d bytes registered", b.inUse(), b.limit)
		}
		if last != wantLast {
			t.Fatalf("take of slot %d: last=%v, want %v", id, last, wantLast)
		}
		_, _, mem := a.locate(id)
		mem[0] = byte(100 + id)
		held = append(held, id)
	}
	take(false) // 1 of 2 free left
	id, ok := a.lend()
	if !ok {
		t.Fatal("a lend refused while the arena could grow")
	}
	_, _, mem := a.locate(id)
	mem[0] = byte(100 + id)
	held = append(held, id)
	if got := b.inUse(); got != 32 {
		t.Fatalf("%d bytes charged after growing once, want 32", got)
	}
	take(false)
	take(true) // the arena's last free slot: the send must ask for a completion
	if _, ok := a.lend(); ok {
		t.Fatal("lent from an empty arena beyond the budget")
	}
	_, _, w1 := a.take()
	_, _, w2 := a.take()
	if w1 == nil || w2 == nil {
		t.Fatal("a take beyond the budget did not wait")
	}
	if err := b.take(1); !errors.Is(err, ErrMemoryBudget) {
		t.Fatalf("the budget after the arena filled it: %v", err)
	}
	for _, id := range held {
		if _, _, mem := a.locate(id); mem[0] != byte(100+id) {
			t.Fatalf("slot %d shares memory with another", id)
		}
	}
	a.give(held[0])
	if !woken(w1) || woken(w2) {
		t.Fatal("one slot back: the first waiter, and only it, must be woken")
	}
	// The first waiter gives up: its wake passes to the next.
	a.forget(w1, true)
	if !woken(w2) {
		t.Fatal("a waiter that gave up did not pass its wake on")
	}
	a.forget(w2, false)
	if id, last, w := a.take(); w != nil || id != held[0] || !last {
		t.Fatalf("take after the give: slot %d last=%v wait=%v, want slot %d, last", id, last, w != nil, held[0])
	}
	if got := a.registered(); got != 32 {
		t.Fatalf("registered() = %d, want 32", got)
	}
}

// TestArenaPrivate: an arena that cannot grow (a connection's own) never
// waits while it has a slot, and lends all but its last.
func TestArenaPrivate(t *testing.T) {
	a := newArena(8, 3, nil, make([]byte, 24), nil)
	for range 2 {
		if _, ok := a.lend(); !ok {
			t.Fatal("lend refused with two or more slots free")
		}
	}
	if _, ok := a.lend(); ok {
		t.Fatal("lent the last free slot")
	}
	if _, last, w := a.take(); w != nil || !last {
		t.Fatalf("take of the last slot: last=%v wait=%v", last, w != nil)
	}
}

// TestArenaSharedAcrossConns is the arena on a device: several
// connections on one transport, whose budget holds their receive buffers
// and one arena chunk of SendSlots slots and nothing more, so that their
// senders — copying (whole and fragmented, too large to go inline) and
// lending, many per connection — all wait for each other's completions
// through the arena. Every message must arrive, the arena must not grow
// beyond its budget, and once all is closed nothing stays registered.
func TestArenaSharedAcrossConns(t *testing.T) {
	ip := guestIP(t)
	const pairs, senders, each = 4, 8, 20
	// Per-connection receives, whose cost registeredCost knows (a zero
	// Receive would be the shared queue under this small a budget).
	o := Options{Receive: ReceivePerConnection, BufferSize: 4096, RecvBuffers: 4, SendSlots: 4}
	perConn, once := registeredCost(o)
	budgetBytes := 2*pairs*perConn + once // both ends of every pair
	o.MemoryBudget = budgetBytes
	tr := New(o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	type end struct{ from, to *conn }
	var ends []end
	for range pairs {
		c, s, _ := pair(t, tr, ip)
		ends = append(ends, end{c, s}, end{s, c})
	}
	if got := tr.Gauges()["registered_bytes"]; got != uint64(budgetBytes) {
		t.Fatalf("%d bytes registered for %d connections, want %d", got, 2*pairs, budgetBytes)
	}
	sizes := []int{1000, 4000, 9000} // one slot, one slot, three fragments
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ends)*senders)
	for _, e := range ends {
		wg.Go(func() {
			for n := 0; n < senders*each; n++ {
				b, err := e.to.Recv(ctx)
				if err != nil {
					errs <- fmt.Errorf("Recv %d: %w", n, err)
					return
				}
				if got := b.Bytes(); len(got) == 0 || got[len(got)-1] != byte(len(got)) {
					errs <- fmt.Errorf("message %d: %d bytes, corrupt", n, len(got))
				}
				b.Release()
			}
		})
		for g := range senders {
			wg.Go(func() {
				for i := range each {
					n := sizes[(g+i)%len(sizes)]
					if (g+i)%2 == 0 || n > int(o.BufferSize) {
						msg := make([]byte, n)
						msg[n-1] = byte(n)
						if err := e.from.Send(ctx, msg); err != nil {
							errs <- fmt.Errorf("Send: %w", err)
							return
						}
						continue
					}
					b, err := e.from.NewSendBuffer(ctx, n)
					if err != nil {
						errs <- fmt.Errorf("NewSendBuffer: %w", err)
						return
					}
					b.Bytes()[n-1] = byte(n)
					if err := e.from.SendBuffer(ctx, b); err != nil {
						errs <- fmt.Errorf("SendBuffer: %w", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := tr.Gauges()["registered_bytes"]; got != uint64(budgetBytes) {
		t.Errorf("%d bytes registered after the traffic, want %d: the arena grew beyond its budget", got, budgetBytes)
	}
	for _, e := range ends {
		e.from.Close()
	}
	waitFor(t, "registered bytes back to zero", func() bool { return tr.Gauges()["registered_bytes"] == 0 })
}
