package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/signal"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// TestTryTake: TrySend's take, without a device. It takes a credit, a
// slot and a send-queue entry when all are there, and otherwise takes
// nothing and leaves no waiter behind on the sender or the arena: with no
// credit, no slot of the connection's, no free slot in the arena (which may
// not grow), no send-queue room beyond the control headroom, or a
// rendezvous in progress. Closed, it fails.
func TestTryTake(t *testing.T) {
	fresh := func() *sender {
		return &sender{
			win:      credit.NewWindow(2),
			mem:      newArena(8, 2, nil, make([]byte, 16), nil),
			avail:    2,
			slots:    2,
			sqFree:   ctlHeadroom + 2,
			closeSig: &signal.Signal{},
			ctr:      &counters{},
		}
	}
	type state struct{ credits, avail, sqFree, arenaFree int }
	snap := func(s *sender) state {
		return state{s.win.Avail(), s.avail, s.sqFree, len(s.mem.free)}
	}
	noWaiters := func(t *testing.T, s *sender) {
		t.Helper()
		if len(s.wake.waiters) != 0 || len(s.mem.sendQ.waiters) != 0 {
			t.Errorf("a declined take left waiters: sender %d, arena %d", len(s.wake.waiters), len(s.mem.sendQ.waiters))
		}
	}

	s := fresh()
	slot, free, ok, err := s.tryTake()
	if free {
		t.Error("a take with no ask from the peer went as a free answer")
	}
	if !ok || err != nil || slot < 0 {
		t.Fatalf("with everything there: slot %d, %v, %v", slot, ok, err)
	}
	if got, want := snap(s), (state{1, 1, ctlHeadroom + 1, 1}); got != want {
		t.Errorf("after a take: %+v, want %+v", got, want)
	}
	if s.lastSlot {
		t.Error("the arena's first of two slots taken as its last")
	}
	if _, _, ok, _ := s.tryTake(); !ok || !s.lastSlot {
		t.Errorf("second take: %v, lastSlot %v; want the arena's last slot", ok, s.lastSlot)
	}

	for _, tc := range []struct {
		name  string
		setup func(s *sender)
	}{
		{"no credit", func(s *sender) { s.win.Take(); s.win.Take() }},
		{"no slot of the connection's", func(s *sender) { s.avail = 0 }},
		{"no slot in the arena", func(s *sender) { s.mem.free = s.mem.free[:0] }},
		{"only the control headroom", func(s *sender) { s.sqFree = ctlHeadroom }},
		{"a rendezvous in progress", func(s *sender) { s.rndv.state = rndvPending }},
		{"a rendezvous reply not yet taken", func(s *sender) { s.rndv.state = rndvDone }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh()
			tc.setup(s)
			before := snap(s)
			slot, _, ok, err := s.tryTake()
			if ok || err != nil || slot != -1 {
				t.Fatalf("took slot %d, %v, %v; want a plain refusal", slot, ok, err)
			}
			if got := snap(s); got != before {
				t.Errorf("a refusal changed %+v to %+v", before, got)
			}
			noWaiters(t, s)
		})
	}

	// The peer asked (answer.go): the next take is its answer, which takes
	// no credit, even with none left; the one after it takes a credit again.
	s = fresh()
	s.win.Take()
	s.win.Take()
	s.answerFree.Store(true)
	if _, free, ok, err := s.tryTake(); !ok || !free || err != nil || s.win.Avail() != 0 || s.answerFree.Load() {
		t.Errorf("an answer with no credit: ok %v, free %v, %v, credits %d, still free %v; want a free take", ok, free, err, s.win.Avail(), s.answerFree.Load())
	}
	if _, _, ok, _ := s.tryTake(); ok {
		t.Error("a second take after the answer went without a credit")
	}
	s = fresh()
	s.answerFree.Store(true)
	if _, free, ok, _ := s.tryTake(); !ok || !free || s.win.Avail() != 2 {
		t.Errorf("an answer with credits: ok %v, free %v, credits %d; want free, the window untouched", ok, free, s.win.Avail())
	}

	s = fresh()
	s.closeSig.Set(transport.ErrClosed)
	if _, _, ok, err := s.tryTake(); ok || !errors.Is(err, transport.ErrClosed) {
		t.Errorf("closed: %v, %v; want ErrClosed", ok, err)
	}
}

// TestTrySend (guest): TrySend sends while credits and slots last; to a
// peer that does not read it reports false once they run out, without
// waiting and without sending; what it sent arrives whole and in order;
// it declines while another send holds the turn; it sends again once the
// peer reads; and it fails on a closed connection.
func TestTrySend(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{})
	cli, srv, _ := pair(t, tr, ip)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	msg := make([]byte, 1024)
	sent := 0
	for ; ; sent++ {
		if sent == 1_000_000 {
			t.Fatal("TrySend never reported false to a peer that does not read")
		}
		binary.BigEndian.PutUint32(msg, uint32(sent))
		ok, err := cli.TrySend(msg)
		if err != nil {
			t.Fatalf("TrySend %d: %v", sent, err)
		}
		if !ok {
			break
		}
	}
	t.Logf("%d messages of 1 KiB taken before TrySend declined", sent)
	if sent == 0 {
		t.Fatal("TrySend sent nothing on a fresh connection")
	}
	for i := range sent {
		m, err := srv.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, n := binary.BigEndian.Uint32(m.Bytes()), len(m.Bytes())
		m.Release()
		if got != uint32(i) || n != len(msg) {
			t.Fatalf("message %d: got number %d, %d bytes", i, got, n)
		}
	}

	// Another sender holds the turn: TrySend does not overtake it.
	cli.turn <- struct{}{}
	ok, err := cli.TrySend([]byte("overtaking"))
	<-cli.turn
	if ok || err != nil {
		t.Fatalf("TrySend while the turn was held: %v, %v; want false", ok, err)
	}

	// The peer read everything: its credits come back, and TrySend goes
	// through again.
	for {
		ok, err := cli.TrySend([]byte("again"))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("TrySend never sent again after the peer read everything")
		}
		runtime.Gosched()
	}
	m, err := srv.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Bytes()) != "again" {
		t.Fatalf("got %q after the peer read; want again", m.Bytes())
	}
	m.Release()

	if ok, err := cli.TrySend(make([]byte, int(cli.peer.bufSize)+1)); ok || err != nil {
		t.Errorf("a message of more than one buffer: %v, %v; want false (Send's)", ok, err)
	}
	cli.Close()
	if ok, err := cli.TrySend([]byte("closed")); ok || err == nil {
		t.Fatalf("TrySend on a closed connection: %v, %v", ok, err)
	}
}

// TestPostWhilePosting: a sender that queues while another's post is in
// the device does not post itself: the poster's loop takes everything
// queued meanwhile in one more post, in queue order, so sends queued by
// turn holders after the first gave its turn back share one doorbell
// (giveTurnAndFlush) and none is left behind.
func TestPostWhilePosting(t *testing.T) {
	s := &sender{ctr: &counters{}}
	var batches [][]uint64
	inDevice, release := make(chan struct{}), make(chan struct{})
	post := func(wrs []verbs.SendWR) error {
		var ids []uint64
		for _, w := range wrs {
			ids = append(ids, w.ID)
		}
		batches = append(batches, ids)
		if len(batches) == 1 {
			close(inDevice)
			<-release
		}
		return nil
	}
	queue := func() {
		s.mu.Lock()
		s.enqueueLocked(verbs.SendWR{ID: s.seq, Signaled: true}, -1)
		s.mu.Unlock()
	}
	queue()
	first := make(chan error, 1)
	go func() { first <- s.postQueued(post) }()
	<-inDevice
	queue()
	queue()
	if err := s.postQueued(post); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(batches) != "[[0] [1 2]]" {
		t.Errorf("posted %v, want [[0] [1 2]]: the first post, then the two queued during it in one", batches)
	}
	if got, posts := s.ctr.sendsPosted.Load(), s.ctr.sendPosts.Load(); got != 3 || posts != 2 {
		t.Errorf("counted %d sends in %d posts, want 3 in 2", got, posts)
	}
	if len(s.outbox) != 0 || s.posting {
		t.Errorf("left %d queued, posting %v", len(s.outbox), s.posting)
	}
}
