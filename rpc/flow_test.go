package rpc

import (
	"testing"

	"pgregory.net/rapid"
)

// The model of docs/rdma.md, "Stream windows and credits": one direction of
// a connection, a sender with N streams and a receiver, over a transport
// with R receive buffers and R credits (as transport/rdma's). The streams'
// flow control is the real inbox and credit; the transport is modelled:
// a message takes a credit and a receive buffer, and the buffer (and its
// credit) comes back when the RPC reader releases it. The reader copies
// every MESSAGE out and releases its buffer at once, as serverLink and
// clientLink do; window updates travel back on the other direction, whose
// reader also always reads, so they are modelled as a queue.

type flowStream struct {
	in      inbox
	out     credit
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
}

func (m *flowModel) send(i int) bool {
	s := m.streams[i]
	s.out.mu.Lock()
	open := s.out.n > 0
	s.out.mu.Unlock()
	if len(s.toSend) == 0 || m.credits == 0 || !open {
		return false
	}
	size := s.toSend[0]
	s.toSend = s.toSend[1:]
	m.credits--
	s.out.take(messageCost(size))
	s.sent++
	m.wire = append(m.wire, wireMsg{i, size})
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

// reader takes the next landed message: copied into its stream's inbox,
// the receive buffer released and its credit returned.
func (m *flowModel) reader(t *testing.T) bool {
	if len(m.landed) == 0 {
		return false
	}
	w := m.landed[0]
	m.landed = m.landed[1:]
	if m.streams[w.stream].in.push(make([]byte, w.size), messageCost(w.size)) != pushed {
		t.Fatalf("stream %d: a sender that kept to its credit was taken for one past its window", w.stream)
	}
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
	_, grant, _, _ := s.in.pop(nil, payloadCost)
	s.got++
	if grant > 0 {
		m.updates = append(m.updates, struct{ stream, n int }{i, grant})
	}
	return true
}

func (m *flowModel) update() bool {
	if len(m.updates) == 0 {
		return false
	}
	u := m.updates[0]
	m.updates = m.updates[1:]
	m.streams[u.stream].out.add(uint32(u.n))
	return true
}

// check: no receive buffer is ever held for a stream, and what a stream
// holds stays within its window plus one message.
func (m *flowModel) check(t *testing.T) {
	if m.credits+len(m.wire)+len(m.landed) != m.r {
		t.Fatalf("credits %d + in flight %d + landed %d != %d receive buffers", m.credits, len(m.wire), len(m.landed), m.r)
	}
	for i, s := range m.streams {
		held := 0
		s.in.mu.Lock()
		for _, b := range s.in.msgs {
			held += messageCost(len(b))
		}
		s.in.mu.Unlock()
		if held > m.window+messageCost(m.maxMsg) {
			t.Fatalf("stream %d holds %d bytes, more than its window %d and one message", i, held, m.window)
		}
	}
}

// TestStreamsNeverStarve: any schedule of sends, arrivals, reads and window
// updates, with any set of streams whose applications never read, ends
// with every other stream having delivered everything it had to send: a
// stalled stream pins no receive buffer, so transport credits keep flowing.
func TestStreamsNeverStarve(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		window := rapid.SampledFrom([]int{defaultWindow, 2 * defaultWindow}).Draw(rt, "window")
		maxMsg := rapid.SampledFrom([]int{100, 40 << 10, 3 * defaultWindow}).Draw(rt, "maxMsg")
		r := rapid.IntRange(1, 8).Draw(rt, "buffers")
		m := &flowModel{credits: r, r: r, window: window, maxMsg: maxMsg}
		n := rapid.IntRange(1, 6).Draw(rt, "streams")
		for range n {
			s := &flowStream{stalled: rapid.Bool().Draw(rt, "stalled")}
			s.in.init(window)
			s.out.init()
			if window > defaultWindow {
				s.out.add(uint32(window - defaultWindow)) // the grant at open
			}
			s.toSend = rapid.SliceOfN(rapid.IntRange(0, maxMsg), 0, 40).Draw(rt, "sizes")
			m.streams = append(m.streams, s)
		}
		for range rapid.IntRange(0, 400).Draw(rt, "steps") {
			i := rapid.IntRange(0, n-1).Draw(rt, "stream")
			switch rapid.IntRange(0, 4).Draw(rt, "action") {
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
				moved = m.arrive() || moved
				moved = m.reader(t) || moved
				moved = m.read(i) || moved
				moved = m.update() || moved
			}
			m.check(t)
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
