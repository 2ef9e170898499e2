package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

// budgetUsed is the registered memory a transport's budget counts now,
// less the idle read buffers its pools keep (rendezvous_pool.go).
func budgetUsed(tr *Transport) int64 {
	return tr.budget.inUse() - poolIdle(tr)
}

// poolIdle is what the transport's read pools keep idle.
func poolIdle(tr *Transport) int64 {
	tr.budget.mu.Lock()
	pools := tr.budget.pools
	tr.budget.mu.Unlock()
	var n int64
	for _, p := range pools {
		n += p.idleBytes()
	}
	return n
}

// recvCheck receives one message and checks it is stamp(sender, seq, n).
func recvCheck(ctx context.Context, c transport.Conn, sender, seq, n int) error {
	b, err := c.Recv(ctx)
	if err != nil {
		return fmt.Errorf("message %d of %d bytes: %w", seq, n, err)
	}
	defer b.Release()
	if !bytes.Equal(b.Bytes(), stamp(sender, seq, n)) {
		return fmt.Errorf("message %d: got %d bytes, want %d as sent", seq, b.Len(), n)
	}
	return nil
}

var rndvSizes = []int{100, 300 << 10, 70 << 10, 1 << 20, 0, 16<<20 + 3, 257 << 10, 4 << 20}

// TestRendezvous: both ends send messages above and below the threshold at
// the same time (each waits for the other's reply while it must reply to
// the other's rendezvous), every one arrives intact and in order, the
// large ones by RDMA Read, not in fragments; then the registered memory is
// back where it was, and the device's error counters did not move.
func TestRendezvous(t *testing.T) {
	ip := guestIP(t)
	before := deviceCounters(t)
	const threshold = 256 << 10
	tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: threshold})
	cli, srv, _ := pair(t, tr, ip)
	base := budgetUsed(tr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const rounds = 3
	errs := make(chan error, 4)
	for side, pair := range [][2]*conn{{cli, srv}, {srv, cli}} {
		from, to := pair[0], pair[1]
		go func() {
			for r := range rounds {
				for i, n := range rndvSizes {
					msg := stamp(side, r*len(rndvSizes)+i, n)
					var err error
					if i%2 == 1 {
						// Marshaled into a lent buffer: a region of its
						// own when large, sent without a copy.
						var b transport.Buffer
						if b, err = from.NewSendBuffer(ctx, n); err == nil {
							copy(b.Bytes(), msg)
							err = from.SendBuffer(ctx, b)
						}
					} else {
						err = from.Send(ctx, msg)
					}
					if err != nil {
						errs <- fmt.Errorf("side %d send: %w", side, err)
						return
					}
				}
			}
			errs <- nil
		}()
		go func() {
			for r := range rounds {
				for i, n := range rndvSizes {
					if err := recvCheck(ctx, to, side, r*len(rndvSizes)+i, n); err != nil {
						errs <- fmt.Errorf("side %d: %w", side, err)
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	large := 0
	for _, n := range rndvSizes {
		if n > threshold {
			large++
		}
	}
	m := tr.Counters()
	t.Logf("counters: %v", m)
	if want := uint64(2 * rounds * large); m["rendezvous_sent"] != want || m["rendezvous_read"] != want {
		t.Errorf("rendezvous sent %d, read %d; want %d each", m["rendezvous_sent"], m["rendezvous_read"], want)
	}
	if m["rendezvous_refused"] != 0 || m["rendezvous_fallback"] != 0 {
		t.Errorf("refused %d, fell back %d", m["rendezvous_refused"], m["rendezvous_fallback"])
	}
	// The senders' regions go back to their pool when their windows'
	// invalidations complete, a moment after the replies.
	waitFor(t, "registered memory back where it was (less the pools')", func() bool { return budgetUsed(tr) == base })
	checkCounters(t, before)
}

// TestRendezvousRefused: a receiver whose memory budget cannot hold the
// message refuses the rendezvous and gets it in fragments; a sender whose
// budget cannot hold the region sends in fragments at once.
func TestRendezvousRefused(t *testing.T) {
	ip := guestIP(t)
	big := New(Options{MaxMessageSize: 32 << 20})
	small := New(Options{MaxMessageSize: 32 << 20, MemoryBudget: 6 << 20})
	cli, srv := dialPair(t, big, small, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 16 << 20
	for i, p := range [][2]*conn{{cli, srv}, {srv, cli}} {
		done := make(chan error, 1)
		go func() { done <- p[0].Send(ctx, stamp(i, i, n)) }()
		if err := recvCheck(ctx, p[1], i, i, n); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := big.Counters()["rendezvous_refused"]; got != 1 {
		t.Errorf("the big side saw %d refusals, want 1", got)
	}
	if got := small.Counters()["rendezvous_fallback"]; got != 1 {
		t.Errorf("the small side fell back %d times, want 1", got)
	}
	if got := big.Counters()["rendezvous_read"] + small.Counters()["rendezvous_read"]; got != 0 {
		t.Errorf("%d rendezvous read", got)
	}
}

// TestRendezvousCancel: a sender whose ctx ends while it waits for the
// peer's reply returns; the next message waits for that reply before it
// goes (nothing overtakes the message being read), and the abandoned
// region is freed when the reply comes.
func TestRendezvousCancel(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{MaxMessageSize: 32 << 20, RecvQueueBytes: 64 << 10, RendezvousThreshold: 256 << 10})
	cli, srv, _ := pair(t, tr, ip)
	base := budgetUsed(tr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 1 << 20
	// The first is delivered and replied to; the second is read but its
	// reply waits for Recv (two messages over RecvQueueBytes).
	if err := cli.Send(ctx, stamp(0, 0, n)); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cli.Send(sctx, stamp(0, 1, n)) }()
	for tr.Counters()["rendezvous_read"] < 2 {
		select {
		case err := <-done:
			t.Fatalf("the second Send returned before Recv made room: %v", err)
		case <-ctx.Done():
			t.Fatal("the second message was never read")
		case <-time.After(time.Millisecond):
		}
	}
	scancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second Send returned %v, want its ctx's error", err)
	}
	third := make(chan error, 1)
	go func() { third <- cli.Send(ctx, stamp(0, 2, n)) }()
	for i := range 3 {
		if err := recvCheck(ctx, srv, 0, i, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "registered memory back where it was (less the pools')", func() bool { return budgetUsed(tr) == base })
}

// TestRendezvousBadKey: a descriptor naming a key the sender never
// registered makes the receiver's read fail: that connection closes with
// an error that says so, and the transport still connects.
func TestRendezvousBadKey(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: 256 << 10})
	cli, srv, lis := pair(t, tr, ip)
	forge := func(d *rndvDesc) { d.rkey ^= 0x5a5a00 }
	cli.rndvHook.Store(&forge)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go cli.Send(ctx, stamp(0, 0, 1<<20)) // ends with the connection
	_, err := srv.Recv(ctx)
	if err == nil || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Recv returned %v, want the connection closed", err)
	}
	if !strings.Contains(srv.closeErr().Error(), "rendezvous") {
		t.Errorf("the close error does not name the rendezvous: %v", srv.closeErr())
	}
	select {
	case <-cli.Done():
	case <-ctx.Done():
		t.Fatal("the sender's connection did not close")
	}
	echoOnce(t, tr, lis)
}

// TestTwoHostsRendezvous, in the test bed's two-guest mode: the client
// sends messages of up to rndvTwoHostMax both ways across the wire (the
// server echoes each back), by rendezvous. 1 GiB does not fit here: a
// guest has 1 GiB of memory and holds the message, its region and the
// peer's copy at once; TestTwoHostsRendezvousHuge moves 1 GiB in bigger
// guests.
func TestTwoHostsRendezvous(t *testing.T) {
	ip := guestIP(t)
	role, peer := os.Getenv("ROLE"), os.Getenv("PEER_IP")
	if role != "server" && role != "client" {
		t.Skip("runs in the test bed's two-guest mode (ROLE=server|client)")
	}
	max := 128 << 20
	if raceEnabled {
		max = 64 << 20 // the race detector's shadow of the Go heap
	}
	sizes := []int{1 << 20, 16 << 20, max}
	before := deviceCounters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The default budget, a quarter of the guest's 1 GiB, holds one
	// 128 MiB region or buffer and the connection, not the server's two
	// at once (the message it echoes, and the region it echoes it from):
	// it would send that one in fragments (rendezvous_fallback).
	tr := New(Options{MaxMessageSize: max, RendezvousThreshold: 256 << 10, MemoryBudget: 3 * int64(max)})
	addr := net.JoinHostPort(ip, "7472")
	if role == "server" {
		lis, err := tr.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		c, err := lis.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range sizes {
			b, err := c.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Send(ctx, b.Bytes())
			b.Release()
			if err != nil {
				t.Fatal(err)
			}
		}
		// The client closes once it has its echoes.
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the client never closed")
		}
	} else {
		var c transport.Conn
		untilServed(t, ctx, "dial", func() (err error) {
			c, err = tr.Dial(ctx, net.JoinHostPort(peer, "7472"))
			return err
		})
		for i, n := range sizes {
			start := time.Now()
			if err := c.Send(ctx, stamp(1, i, n)); err != nil {
				t.Fatal(err)
			}
			if err := recvCheck(ctx, c, 1, i, n); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d MiB there and back in %v", n>>20, time.Since(start))
		}
		c.Close()
	}
	m := tr.Counters()
	t.Logf("counters: %v", m)
	if m["rendezvous_sent"] != uint64(len(sizes)) || m["rendezvous_read"] != uint64(len(sizes)) {
		t.Errorf("rendezvous sent %d, read %d; want %d each", m["rendezvous_sent"], m["rendezvous_read"], len(sizes))
	}
	checkCounters(t, before)
}

// TestRendezvousPool: a receiver reads into a pooled buffer when the last
// message of the same class was released (no registration), keeps at most
// its bound idle, and gives idle buffers back to a budget that needs them.
func TestRendezvousPool(t *testing.T) {
	ip := guestIP(t)
	const budgetBytes = 48 << 20
	tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: 256 << 10, MemoryBudget: budgetBytes})
	cli, srv, _ := pair(t, tr, ip)
	base := budgetUsed(tr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sizes := []int{1 << 20, 1<<20 - 100, 900 << 10, 1 << 20, 16 << 20, 1 << 20}
	for i, n := range sizes {
		// Send returns at the receiver's done, sent when the message
		// was read: Recv has it, and its release comes before the
		// next descriptor.
		if err := cli.Send(ctx, stamp(0, i, n)); err != nil {
			t.Fatal(err)
		}
		if err := recvCheck(ctx, srv, 0, i, n); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*readPool{srv.dev.reads, srv.dev.wins} {
			if idle := p.idleBytes(); idle > p.idleMax {
				t.Fatalf("a pool keeps %d bytes idle, over its bound %d", idle, p.idleMax)
			}
		}
	}
	m := tr.Counters()
	// 1 MiB, 1 MiB - 100 and 900 KiB are one class (1 MiB); 16 MiB is
	// over the bound (a quarter of the budget) and never kept.
	if m["rendezvous_read"] != uint64(len(sizes)) || m["rendezvous_pooled"] != 4 {
		t.Errorf("read %d, %d of them into pooled buffers; want %d, 4", m["rendezvous_read"], m["rendezvous_pooled"], len(sizes))
	}
	if idle := srv.dev.reads.idleBytes(); idle != 1<<20 {
		t.Errorf("the read pool keeps %d bytes idle, want one 1 MiB buffer", idle)
	}
	waitFor(t, "registered memory back where it was (less the pools')", func() bool { return budgetUsed(tr) == base })
	// A taker that needs the idle buffer's room gets it.
	room := budgetBytes - tr.budget.inUse()
	if err := tr.budget.take(room + 1); err != nil {
		t.Fatalf("the budget did not free the pool for %d bytes: %v", room+1, err)
	}
	if idle := srv.dev.reads.idleBytes(); idle != 0 {
		t.Errorf("the read pool still keeps %d bytes", idle)
	}
	tr.budget.give(room + 1)
	if err := tr.budget.take(budgetBytes); err == nil {
		t.Fatal("the budget gave more than it has")
	}
}

// TestRendezvousStaleKey: a key is valid until the receiver's done, not
// after. A sender that hands out an earlier rendezvous' key and address
// again (the region was deregistered at that one's done) makes the
// receiver's read fail at the NIC: that connection closes with an error
// that names the rendezvous, and the transport still connects.
func TestRendezvousStaleKey(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: 256 << 10})
	cli, srv, lis := pair(t, tr, ip)
	var first *rndvDesc
	stale := func(d *rndvDesc) {
		if first == nil {
			first = new(rndvDesc)
			*first = *d
			return
		}
		// A new region may by chance get the old one's key and address:
		// then the old descriptor is the new one, and valid.
		if d.rkey != first.rkey || d.addr != first.addr {
			d.rkey, d.addr = first.rkey, first.addr
		}
	}
	cli.rndvHook.Store(&stale)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 1 << 20
	if err := cli.Send(ctx, stamp(0, 0, n)); err != nil {
		t.Fatal(err)
	}
	if err := recvCheck(ctx, srv, 0, 0, n); err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			if err := cli.Send(ctx, stamp(0, i, n)); err != nil {
				sent <- err
				return
			}
		}
	}()
	for i := 1; ; i++ {
		b, err := srv.Recv(ctx)
		if err != nil {
			if !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("Recv returned %v, want the connection closed", err)
			}
			break
		}
		// Only a message whose region happened to get the old key and
		// address is read (and then it is the new message, intact).
		if !bytes.Equal(b.Bytes(), stamp(0, i, n)) {
			t.Fatalf("message %d read through a stale key is not the message sent", i)
		}
		b.Release()
	}
	if !strings.Contains(srv.closeErr().Error(), "rendezvous") {
		t.Errorf("the close error does not name the rendezvous: %v", srv.closeErr())
	}
	if err := <-sent; err == nil {
		t.Fatal("the sender did not fail")
	}
	echoOnce(t, tr, lis)
}

// TestRendezvousWindowTail: a peer that reads past the message, within the
// pooled region its window is bound to, finds zeros there, not what an
// earlier message left (rxe checks a window's reads against its MR's
// bounds only: the sender scrubs the tail), or, on a device that holds
// the window's bounds, a refused read. The forged length stands for a
// peer that reads more than it was told.
func TestRendezvousWindowTail(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: 256 << 10})
	cli, srv, _ := pair(t, tr, ip)
	const first, second = 1 << 20, 900 << 10 // one class: the second reuses the first's region
	var n int
	longer := func(d *rndvDesc) {
		if n++; n == 2 {
			d.n = first
		}
	}
	cli.rndvHook.Store(&longer)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := bytes.Repeat([]byte{0xee}, first)
	if err := cli.Send(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := recvCheckBytes(ctx, srv, old); err != nil {
		t.Fatal(err)
	}
	if tr.Counters()["rendezvous_windowed"] == 0 {
		t.Skip("no windowed regions (-rdma.windows=false, or no memory windows on this device): regions are registered per transfer")
	}
	// Its invalidation completed: the region is the pool's again.
	waitFor(t, "the first region back in its pool", func() bool { return cli.dev.wins.idleBytes() >= first })
	msg := stamp(0, 1, second)
	go cli.Send(ctx, msg) // returns at the reply, or with the connection
	b, err := srv.Recv(ctx)
	if err != nil {
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatal(err)
		}
		t.Logf("the device refused the read past the window: %v", srv.closeErr())
		return
	}
	defer b.Release()
	got := b.Bytes()
	if len(got) != first || !bytes.Equal(got[:second], msg) {
		t.Fatalf("got %d bytes, want the %d-byte message and %d more", len(got), second, first-second)
	}
	if i := bytes.IndexFunc(got[second:], func(r rune) bool { return r != 0 }); i >= 0 {
		t.Fatalf("byte %d past the message is not zero: the earlier message's tail was readable", second+i)
	}
}

// recvCheckBytes receives one message and checks it is want.
func recvCheckBytes(ctx context.Context, c transport.Conn, want []byte) error {
	b, err := c.Recv(ctx)
	if err != nil {
		return err
	}
	defer b.Release()
	if !bytes.Equal(b.Bytes(), want) {
		return fmt.Errorf("got %d bytes, want %d as sent", b.Len(), len(want))
	}
	return nil
}

// TestRendezvousLentReleasedTwice (cb2a7c6): a region NewSendBuffer lent
// and SendBuffer took is the rendezvous'; a Release of the caller's copy
// afterwards neither frees it nor counts it back a second time (the
// connection's lent count would go below what is really lent, and its
// memory could be freed under a buffer still lent).
func TestRendezvousLentReleasedTwice(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{MaxMessageSize: 32 << 20, RendezvousThreshold: 256 << 10})
	cli, srv, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 1 << 20
	before := cli.lentBufs.Load()
	b, err := cli.NewSendBuffer(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if got := cli.lentBufs.Load(); got != before+1 {
		t.Fatalf("lent count %d after NewSendBuffer, want %d", got, before+1)
	}
	copy(b.Bytes(), stamp(0, 0, n))
	if err := cli.SendBuffer(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if got := cli.lentBufs.Load(); got != before {
		t.Fatalf("lent count %d after SendBuffer and a Release, want %d", got, before)
	}
	if err := recvCheck(ctx, srv, 0, 0, n); err != nil {
		t.Fatal(err)
	}
	if tr.Counters()["rendezvous_sent"] != 1 {
		t.Errorf("sent %d by rendezvous, want 1", tr.Counters()["rendezvous_sent"])
	}
}

// TestRendezvousReplyAfterCreditOnly: a receiver whose window is used up
// when the read completes owes its reply until a credit comes. Its peer
// holds its turn while it waits for that reply, so the only thing that can
// bring the credit is a credit-only message: that message must send the
// reply. (Before, only a grant on a data message did: the sender waited
// forever. The transport conformance suite's SendBuffer hung so in CI, 1
// in several runs, when the echo's credits came back that way.)
func TestRendezvousReplyAfterCreditOnly(t *testing.T) {
	ip := guestIP(t)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"own", Options{Receive: ReceivePerConnection, RecvBuffers: 4}},
		{"shared", Options{Receive: ReceiveShared, RecvBuffers: 2, SharedCredits: 2}}, // nothing to lend: the window stays used up
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.MaxMessageSize, o.RendezvousThreshold = 8<<20, 256<<10
			tr := New(o)
			cli, srv, _ := pair(t, tr, ip)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// The server uses its window up; the client takes none of it
			// yet, so no credit goes back.
			sent := 0
			for srv.windowAvail() > 0 {
				if sent == 100 {
					t.Fatalf("the window is still open after %d messages the client did not take", sent)
				}
				if err := srv.Send(ctx, stamp(1, sent, 100)); err != nil {
					t.Fatal(err)
				}
				sent++
			}
			big := 1 << 20
			done := make(chan error, 1)
			go func() { done <- cli.Send(ctx, stamp(0, 0, big)) }()
			if err := recvCheck(ctx, srv, 0, 0, big); err != nil {
				t.Fatal(err)
			}
			// The message was read; its reply waits for a credit.
			waitFor(t, "the server's reply owed", srv.replyOwedNow)
			// The client takes the server's messages: their credits go
			// back in a credit-only message.
			for i := range sent {
				if err := recvCheck(ctx, cli, 1, i, 100); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("the rendezvous' Send: %v (its reply never came)", err)
			}
			if m := tr.Counters(); m["credit_only_sent"] == 0 {
				t.Errorf("no credit-only message was sent: the test did not test it (counters %v)", m)
			}
		})
	}
}

// windowAvail is the sender's window now.
func (s *sender) windowAvail() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.win.Avail()
}

// replyOwedNow reports whether a rendezvous reply waits for a credit.
func (s *sender) replyOwedNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rndv.replyOwed != 0
}
