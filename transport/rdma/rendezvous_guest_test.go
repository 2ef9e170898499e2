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

// budgetUsed is the registered memory a transport's budget counts now.
func budgetUsed(tr *Transport) int64 {
	tr.budget.mu.Lock()
	defer tr.budget.mu.Unlock()
	return tr.budget.used
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
	if used := budgetUsed(tr); used != base {
		t.Errorf("registered memory %d after the transfers, %d before", used, base)
	}
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
	if used := budgetUsed(tr); used != base {
		t.Errorf("registered memory %d after the transfers, %d before", used, base)
	}
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
// server echoes each back), by rendezvous. 1 GiB does not fit: a guest
// has 1 GiB of memory and holds the message, its region and the peer's
// copy at once (docs/rdma.md).
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
