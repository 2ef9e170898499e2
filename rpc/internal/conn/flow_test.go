package conn

import (
	"testing"

	"pgregory.net/rapid"
)

// The model of docs/rdma.md, "Stream windows and credits": one direction of
// a connection, a sender with N streams and a receiver, over a transport
// with R receive buffers and R credits (as transport/rdma's). The streams'
// flow control is the real Inbox and credit; the transport is modelled:
// a message takes a credit and a receive buffer, and the buffer (and its
// credit) comes back when the RPC reader releases it. The reader copies
// every MESSAGE out and releases its buffer at once, as serverLink and
// clientLink do; window updates travel back on the other direction, whose
// reader also always reads, so they are modelled as a queue.
//
// The connection window is the real ConnFlow on both ends (out: the
// sender's credit, in: the receiver's window). A send takes the stream's
// and the connection's credit, as SendMsg does, and the frame then waits
// among the pending ones until the transport takes it: the sends of
// different streams reach the wire in any order, as concurrent goroutines'
// do, which the receiver's check must allow.

type flowStream struct {
	in      Inbox
	out     Credit
	pending bool  // a send took its credits; the transport has not taken it yet
	toSend  []int // sizes of the payloads still to send
	sent    int
	got     int
	stalled bool // its application never reads
}

type wireMsg struct {
	stream, size int
}

type flowModel struct {
	streams []*flowStream
	credits int       // transport credits the sender holds
	r       int       // receive buffers
	wire    []wireMsg // in order, each in a receive buffer once it arrived
	landed  []wireMsg // arrived in a receive buffer, not yet taken by the reader
	updates []struct{ stream, n int }
	window  int
	maxMsg  int

	out, in ConnFlow  // the connection window: the sender's, the receiver's
	pending []wireMsg // sends that took their credits, in the order they did
	held    int64     // what the receiver's inboxes hold, in window bytes
}

// send is stream i's SendMsg taking its credits: the stream's while it is
// positive, then the connection's.
func (m *flowModel) send(i int) bool {
	s := m.streams[i]
	s.out.mu.Lock()
	open := s.out.n > 0
	s.out.mu.Unlock()
	m.out.mu.Lock()
	connOpen := m.out.n > 0
	m.out.mu.Unlock()
	if len(s.toSend) == 0 || s.pending || !open || !connOpen {
		return false
	}
	size := s.toSend[0]
	s.toSend = s.toSend[1:]
	if !m.out.Acquire(nil, MessageCost(size)) {
		panic("acquire waited on a positive credit")
	}
	s.out.Take(MessageCost(size))
	s.pending = true
	m.pending = append(m.pending, wireMsg{i, size})
	return true
}

// post is the transport taking the k-th pending send (k modulo their
// number): any of them may be first.
func (m *flowModel) post(k int) bool {
	if len(m.pending) == 0 || m.credits == 0 {
		return false
	}
	k %= len(m.pending)
	w := m.pending[k]
	m.pending = append(m.pending[:k], m.pending[k+1:]...)
	m.credits--
	m.streams[w.stream].pending = false
	m.streams[w.stream].sent++
	m.wire = append(m.wire, w)
	return true
}

func (m *flowModel) arrive() bool {
	if len(m.wire) == 0 {
		return false
	}
	m.landed = append(m.landed, m.wire[0])
	m.wire = m.wire[1:]
	return true
}

// reader takes the next landed message: copied into its stream's Inbox,
// the receive buffer released and its credit returned.
func (m *flowModel) reader(t *testing.T) bool {
	if len(m.landed) == 0 {
		return false
	}
	w := m.landed[0]
	m.landed = m.landed[1:]
	if !m.in.Accepts(m.held) {
		t.Fatalf("stream %d: a sender that kept to its credit was taken for one past the connection's window (%d held, window %d)", w.stream, m.held, m.in.window)
	}
	if m.streams[w.stream].in.Push(make([]byte, w.size), MessageCost(w.size)) != Pushed {
		t.Fatalf("stream %d: a sender that kept to its credit was taken for one past its window", w.stream)
	}
	m.held += int64(MessageCost(w.size))
	m.credits++
	return true
}

// read is stream i's application reading one message, if it reads.
func (m *flowModel) read(i int) bool {
	s := m.streams[i]
	s.in.mu.Lock()
	n := len(s.in.msgs)
	s.in.mu.Unlock()
	if s.stalled || n == 0 {
		return false
	}
	msg, grant, _, _ := s.in.Pop(nil, PayloadCost)
	s.got++
	if grant > 0 {
		m.updates = append(m.updates, struct{ stream, n int }{i, grant})
	}
	m.held -= int64(PayloadCost(msg))
	if grant := m.in.Free(PayloadCost(msg)); grant > 0 {
		m.updates = append(m.updates, struct{ stream, n int }{-1, grant})
	}
	return true
}

func (m *flowModel) update() bool {
	if len(m.updates) == 0 {
		return false
	}
	u := m.updates[0]
	m.updates = m.updates[1:]
	if u.stream < 0 {
		m.out.Add(int64(u.n))
		return true
	}
	m.streams[u.stream].out.Add(uint32(u.n))
	return true
}

// check: no receive buffer is ever held for a stream, and what a stream
// holds stays within its window plus one message.
func (m *flowModel) check(t *testing.T) {
	if m.held >= int64(m.in.window)+int64(MessageCost(m.maxMsg)) {
		t.Fatalf("the connection holds %d bytes, more than its window %d and one message", m.held, m.in.window)
	}
	if m.credits+len(m.wire)+len(m.landed) != m.r {
		t.Fatalf("credits %d + in flight %d + landed %d != %d receive buffers", m.credits, len(m.wire), len(m.landed), m.r)
	}
	for i, s := range m.streams {
		held := 0
		s.in.mu.Lock()
		for _, b := range s.in.msgs {
			held += MessageCost(len(b))
		}
		s.in.mu.Unlock()
		if held > m.window+MessageCost(m.maxMsg) {
			t.Fatalf("stream %d holds %d bytes, more than its window %d and one message", i, held, m.window)
		}
	}
}

// TestStreamsNeverStarve: any schedule of sends, arrivals, reads and window
// updates, with any set of streams whose applications never read, ends
// with every other stream having delivered everything it had to send: a
// stalled stream pins no receive buffer, so transport credits keep flowing,
// and it pins at most its window and one message of the connection's, so
// a connection window larger than what the stalled streams can pin keeps
// the others going. A sender that keeps to both credits is never taken for
// one past a window, whatever order its streams' frames reach the wire in.
func TestStreamsNeverStarve(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		window := rapid.SampledFrom([]int{DefaultWindow, 2 * DefaultWindow}).Draw(rt, "window")
		maxMsg := rapid.SampledFrom([]int{100, 40 << 10, 3 * DefaultWindow}).Draw(rt, "maxMsg")
		connWindow := rapid.SampledFrom([]int{DefaultWindow, 4 * DefaultWindow, 16 * DefaultWindow, 64 * DefaultWindow}).Draw(rt, "connWindow")
		r := rapid.IntRange(1, 8).Draw(rt, "buffers")
		m := &flowModel{credits: r, r: r, window: window, maxMsg: maxMsg}
		m.out.Init(DefaultWindow, maxMsg)
		m.in.Init(connWindow, maxMsg)
		m.out.PeerWindow(m.in.Settings()) // the receiver's SETTINGS
		n := rapid.IntRange(1, 6).Draw(rt, "streams")
		stalled := 0
		for range n {
			s := &flowStream{stalled: rapid.Bool().Draw(rt, "stalled")}
			if s.stalled {
				stalled++
			}
			s.in.Init(window)
			s.out.Init()
			if window > DefaultWindow {
				s.out.Add(uint32(window - DefaultWindow)) // the grant at open
			}
			s.toSend = rapid.SliceOfN(rapid.IntRange(0, maxMsg), 0, 40).Draw(rt, "sizes")
			m.streams = append(m.streams, s)
		}
		for range rapid.IntRange(0, 400).Draw(rt, "steps") {
			i := rapid.IntRange(0, n-1).Draw(rt, "stream")
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 5:
				m.post(rapid.IntRange(0, n-1).Draw(rt, "pending"))
			case 0:
				m.send(i)
			case 1:
				m.arrive()
			case 2:
				m.reader(t)
			case 3:
				m.read(i)
			case 4:
				m.update()
			}
			m.check(t)
		}
		// Let everything that can move, move.
		for moved := true; moved; {
			moved = false
			for i := range m.streams {
				moved = m.send(i) || moved
				moved = m.post(i) || moved
				moved = m.arrive() || moved
				moved = m.reader(t) || moved
				moved = m.read(i) || moved
				moved = m.update() || moved
			}
			m.check(t)
		}
		// What the stalled streams can pin of the connection's window, and
		// what the receiver may owe without granting it yet (a quarter).
		pinned := stalled * (window + MessageCost(maxMsg))
		if pinned+connWindow/4 >= connWindow {
			return // the reading streams may wait for the stalled ones: the memory bound at work
		}
		for i, s := range m.streams {
			if !s.stalled && (len(s.toSend) != 0 || s.got != s.sent) {
				t.Fatalf("stream %d (reading) starved: %d left to send, %d sent, %d read; stalled: %v", i, len(s.toSend), s.sent, s.got, stalledOf(m))
			}
		}
		if m.credits != r {
			t.Fatalf("%d of %d transport credits are back after the run", m.credits, r)
		}
	})
}

func stalledOf(m *flowModel) []bool {
	var st []bool
	for _, s := range m.streams {
		st = append(st, s.stalled)
	}
	return st
}

// TestInboxOrderAndMemory: whatever the order of pushes and pops, messages
// come out in the order they went in, and the queue's array stays within a
// small multiple of what waits in it (it is kept between messages, so a
// stream does not allocate one per message, and must not grow without end
// when it never drains).
func TestInboxOrderAndMemory(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var in Inbox
		in.Init(1 << 30)
		next, want := 0, 0
		for _, push := range rapid.SliceOfN(rapid.Bool(), 1, 2000).Draw(rt, "ops") {
			if push {
				if in.Push([]byte{byte(next)}, 1) != Pushed {
					rt.Fatal("push refused")
				}
				next++
			} else if in.Queued() {
				msg, _, _, _ := in.Pop(nil, func([]byte) int { return 1 })
				if msg[0] != byte(want) {
					rt.Fatalf("popped %d, want %d", msg[0], byte(want))
				}
				want++
			}
			waiting := next - want
			if c := cap(in.msgs); c > 4*max(waiting, 16)+8 {
				rt.Fatalf("array of %d for %d waiting", c, waiting)
			}
		}
	})
}

// TestInboxKeepsItsArray: a stream whose messages are each read before the
// next comes allocates nothing per message in its queue.
func TestInboxKeepsItsArray(t *testing.T) {
	var in Inbox
	in.Init(1 << 30)
	msg := []byte{1}
	cost := func([]byte) int { return 1 }
	in.Push(msg, 1)
	in.Pop(nil, cost)
	if n := testing.AllocsPerRun(100, func() {
		in.Push(msg, 1)
		in.Pop(nil, cost)
	}); n != 0 {
		t.Errorf("%v allocations per message, want 0", n)
	}
}

// TestInboxGrows: a message of more than a quarter of the window, once
// read, raises the window to four such messages (granted to the sender at
// once), up to the bound Grow set; small messages and an inbox without
// Grow keep the window as it was.
func TestInboxGrows(t *testing.T) {
	cost := func(m []byte) int { return len(m) }
	read := func(in *Inbox, n int) int {
		if in.Push(make([]byte, n), n) != Pushed {
			t.Fatalf("a %d-byte message refused", n)
		}
		_, grant, _, _ := in.Pop(nil, cost)
		return grant
	}
	var in Inbox
	in.Init(DefaultWindow)
	in.Grow(1 << 20)
	big := DefaultWindow + 12
	if g := read(&in, big); g != 4*big-DefaultWindow || in.window != 4*big {
		t.Fatalf("first large message: grant %d, window %d; want %d, %d", g, in.window, 4*big-DefaultWindow, 4*big)
	}
	// The sender now has three more messages' room: they are not past the
	// window.
	for i := range 3 {
		if in.Push(make([]byte, big), big) != Pushed {
			t.Fatalf("message %d of the grown window refused", i)
		}
	}
	for range 3 {
		in.Pop(nil, cost)
	}
	for range 4 {
		read(&in, 512<<10)
	}
	if in.window != 1<<20 {
		t.Fatalf("window %d after messages of 512 KiB, want the bound %d", in.window, 1<<20)
	}

	var small, static Inbox
	small.Init(DefaultWindow)
	small.Grow(1 << 20)
	static.Init(DefaultWindow)
	for range 100 {
		read(&small, 1024)
		read(&static, big)
	}
	if small.window != DefaultWindow || static.window != DefaultWindow {
		t.Fatalf("windows %d (1 KiB messages) and %d (no Grow), want both %d", small.window, static.window, DefaultWindow)
	}
}
