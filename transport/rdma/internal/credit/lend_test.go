package credit

import (
	"testing"

	"pgregory.net/rapid"
)

// The model of lent credits: many connections send data into one shared
// pool of receive buffers (one direction: A, the sender, into B's pool;
// the other direction is the same with the roles swapped). Each connection
// has a guaranteed window g; B lends more when A has used all it holds,
// committing buffers from the pool and growing it in chunks up to a limit;
// A gives lent credits back once idle. Connections come and go.

type lkind int

const (
	lData     lkind = iota // A→B: a data message (takes a credit)
	lGiveBack              // A→B: a give-back (takes a credit too)
	lControl               // A→B: a control message for the other direction (no credit)
	lPiggy                 // B→A: a data message of B's, with returns and lends
	lCredit                // B→A: a credit-only message, with returns and lends
	lBack                  // B→A: B's give-back for the other direction, with returns and no lend (its lend field carries what it gives back)
)

type lmsg struct {
	kind        lkind
	grant, lend int // B→A
	back        int // A→B give-back
}

type lconn struct {
	id            int
	win           *Window // A's
	led           *Ledger // B's
	toB, toA      []lmsg  // in order, as on an RC queue pair
	held          int     // B: data buffers its user holds
	unposted      int     // B: released buffers waiting to be posted in a batch
	ctlToB        int     // A→B control messages in flight: Extra at most (the other direction's bound)
	creditOnlyToA int     // B→A credit-only messages in flight: the bound Extra is checked
	want          int     // data messages A still wants to send
	sent, got     int
}

type pmodel struct {
	t             *testing.T
	g, cap        int // guaranteed window; the most a window grows to by lending
	chunk, limit  int // pool growth
	pool          Pool
	posted        int // buffers posted on the shared receive queue
	conns         []*lconn
	deadHeld      int // buffers held by the users of closed connections
	next          int
	lent, refused int // lends made; lends the pool could not make
}

func (m *pmodel) grow() bool {
	if m.pool.Buffers()+m.chunk > m.limit {
		return false
	}
	m.pool.Grow(m.chunk)
	m.posted += m.chunk
	return true
}

// join opens a connection if the pool has (or can grow to have) its
// guaranteed window and control receives.
func (m *pmodel) join(want int) bool {
	for !m.pool.Commit(m.g + Extra) {
		if !m.grow() {
			return false // refused: the budget's error
		}
	}
	// A fresh connection's window starts full when the pool has spare
	// buffers, lent from the start (no grow for it).
	w := m.g + m.pool.CommitUpTo(m.cap-m.g)
	m.next++
	m.conns = append(m.conns, &lconn{id: m.next, win: NewWindow(w), led: NewLentLedger(w, m.g), want: want})
	return true
}

func (m *pmodel) send(c *lconn) bool {
	if c.want == 0 || !c.win.Take() {
		return false
	}
	c.toB = append(c.toB, lmsg{kind: lData})
	c.want--
	c.sent++
	return true
}

func (m *pmodel) sendControl(c *lconn) bool {
	if c.ctlToB >= Extra {
		return false
	}
	c.ctlToB++
	c.toB = append(c.toB, lmsg{kind: lControl})
	return true
}

func (m *pmodel) giveBack(c *lconn) bool {
	n := c.win.GiveBack(m.g)
	if n == 0 {
		return false
	}
	if !c.win.Take() {
		m.t.Fatalf("conn %d: no credit for the give-back after giving back to %d", c.id, m.g)
	}
	c.toB = append(c.toB, lmsg{kind: lGiveBack, back: n})
	return true
}

// arriveB: the next A→B message lands in a buffer of the shared queue and
// is handled at once, then the released buffers waiting are posted.
func (m *pmodel) arriveB(c *lconn) bool {
	if !m.handleB(c) {
		return false
	}
	m.flush(c)
	return true
}

func (m *pmodel) handleB(c *lconn) bool {
	if len(c.toB) == 0 {
		return false
	}
	x := c.toB[0]
	c.toB = c.toB[1:]
	if m.posted == 0 {
		m.t.Fatalf("RNR: conn %d's message found the shared queue empty: %+v", c.id, m)
	}
	m.posted--
	switch x.kind {
	case lControl:
		m.posted++ // posted again at once
		c.ctlToB--
		return true
	case lGiveBack:
		if err := c.led.Arrived(); err != nil {
			m.t.Fatalf("conn %d: %v", c.id, err)
		}
		freed, err := c.led.TakeBack(x.back)
		if err != nil {
			m.t.Fatalf("conn %d: %v", c.id, err)
		}
		m.pool.Release(freed)
		m.posted++ // empty: posted again at once, its credit owed
		c.led.Reposted()
		m.creditOnly(c)
		return true
	}
	if err := c.led.Arrived(); err != nil {
		m.t.Fatalf("conn %d: %v", c.id, err)
	}
	c.held++
	c.got++
	if c.led.Exhausted() && c.led.LendOwed() == 0 {
		m.lend(c)
	}
	return true
}

// lend: A has used every credit it holds; B lends up to as many again
// (within cap) from the pool, growing it when short.
func (m *pmodel) lend(c *lconn) {
	want := min(c.led.Recvs(), m.cap-c.led.Recvs())
	if want <= 0 {
		return
	}
	k := m.pool.CommitUpTo(want)
	for k < want && m.grow() {
		k += m.pool.CommitUpTo(want - k)
	}
	if k == 0 {
		m.refused++
		return
	}
	c.led.Lend(k)
	m.lent++
}

func (m *pmodel) creditOnly(c *lconn) {
	if n := c.led.CreditOnly(); n > 0 {
		c.toA = append(c.toA, lmsg{kind: lCredit, grant: n, lend: c.led.TakeLend()})
		c.creditOnlyToA++
		if c.creditOnlyToA > Extra {
			m.t.Fatalf("conn %d: %d credit-only messages in flight, beyond the %d control receives", c.id, c.creditOnlyToA, Extra)
		}
	}
}

// release: B's user releases a message; the buffer goes back to the
// shared queue and its credit is owed once a batch of them is posted (as
// the transport does: a quarter of the window, within PostBatch).
func (m *pmodel) release(c *lconn) bool {
	if c.held == 0 {
		return false
	}
	c.held--
	c.unposted++
	if c.unposted >= c.led.PostBatch(max(1, c.led.Recvs()/4)) {
		m.flush(c)
	}
	return true
}

// flush posts the released buffers waiting, as the transport's poller does
// whenever it handles a completion.
func (m *pmodel) flush(c *lconn) {
	if c.unposted == 0 {
		return
	}
	m.posted += c.unposted
	for ; c.unposted > 0; c.unposted-- {
		c.led.Reposted()
	}
	m.creditOnly(c)
}

// piggy: B sends a message of its own, carrying what is owed and lent.
func (m *pmodel) piggy(c *lconn) bool {
	c.toA = append(c.toA, lmsg{kind: lPiggy, grant: c.led.Piggyback(), lend: c.led.TakeLend()})
	return true
}

// backB: B gives back credits A lent it for the other direction. The
// give-back returns what B owes, but its lend field holds what it gives
// back, so a lend of B's not yet told stays untold.
func (m *pmodel) backB(c *lconn) bool {
	c.toA = append(c.toA, lmsg{kind: lBack, grant: c.led.Piggyback()})
	return true
}

func (m *pmodel) arriveA(c *lconn) bool {
	if len(c.toA) == 0 {
		return false
	}
	x := c.toA[0]
	c.toA = c.toA[1:]
	if err := c.win.Lend(x.lend); err != nil {
		m.t.Fatalf("conn %d: %v", c.id, err)
	}
	var err error
	if x.kind == lCredit {
		c.creditOnlyToA--
		err = c.win.GrantControl(x.grant)
	} else {
		err = c.win.Grant(x.grant)
	}
	if err != nil {
		m.t.Fatalf("conn %d: %v", c.id, err)
	}
	return true
}

// close: the queue pair goes to ERR, nothing more arrives; the window's
// buffers go back to the pool but for those the user still holds.
func (m *pmodel) close(i int) {
	c := m.conns[i]
	m.posted += c.unposted // posted again when the connection leaves the pool
	m.pool.Release(c.led.Recvs() + Extra - c.held)
	m.deadHeld += c.held
	m.conns = append(m.conns[:i], m.conns[i+1:]...)
}

func (m *pmodel) releaseDead() bool {
	if m.deadHeld == 0 {
		return false
	}
	m.deadHeld--
	m.posted++
	m.pool.Release(1)
	return true
}

// check asserts what holds in every state, above all the invariant that
// makes RNR impossible: the buffers posted cover every data message a peer
// may still send (its credits, what is on the wire, returns and lends on
// their way to it) plus every control message it may send.
func (m *pmodel) check() {
	held := m.deadHeld
	need := 0
	unposted := 0
	for _, c := range m.conns {
		held += c.held
		unposted += c.unposted
		future := c.win.Avail()
		for _, x := range c.toB {
			if x.kind != lControl {
				future++
			}
		}
		for _, x := range c.toA {
			future += x.grant + x.lend
		}
		need += future + Extra
		if c.win.Max() < m.g || c.win.Avail() < 0 || c.win.Outstanding() > c.win.Max() || c.led.Recvs() > m.cap {
			m.t.Fatalf("conn %d: window %d, %d available, B's view %d (g %d, cap %d)", c.id, c.win.Max(), c.win.Avail(), c.led.Recvs(), m.g, m.cap)
		}
	}
	if m.posted != m.pool.Buffers()-held-unposted {
		m.t.Fatalf("%d posted, %d in the pool, %d held, %d waiting to be posted: a buffer is lost", m.posted, m.pool.Buffers(), held, unposted)
	}
	if m.posted < need {
		m.t.Fatalf("%d buffers posted, peers may send %d: RNR possible", m.posted, need)
	}
	if m.pool.Committed() > m.pool.Buffers() || m.pool.Buffers() > m.limit {
		m.t.Fatalf("pool: %d committed of %d buffers, limit %d", m.pool.Committed(), m.pool.Buffers(), m.limit)
	}
}

// settle runs every action but joins, closes and give-backs until nothing
// moves; it fails if a sender still waits then (starvation or deadlock).
func (m *pmodel) settle() {
	for round := 0; ; round++ {
		if round > 100_000 {
			m.t.Fatal("no quiescence after 100000 rounds")
		}
		moved := m.releaseDead()
		for _, c := range m.conns {
			moved = m.send(c) || moved
			moved = m.arriveB(c) || moved
			moved = m.release(c) || moved
			moved = m.arriveA(c) || moved
		}
		m.check()
		if !moved {
			break
		}
	}
	for _, c := range m.conns {
		if c.want != 0 || c.got != c.sent {
			m.t.Fatalf("conn %d starved: %d left to send, %d sent, %d got, window %d with %d available",
				c.id, c.want, c.sent, c.got, c.win.Max(), c.win.Avail())
		}
	}
}

// TestLending drives many connections over one shared pool through random
// sends, arrivals, releases, lends (with pool growth, and refusals when it
// is at its limit), give-backs, control messages, joins and closes, and
// checks the invariant at every step (no RNR possible, no buffer lost, the
// pool never overcommitted, credit-only messages within Extra). Then it
// lets everything settle: no sender is left waiting, however exhausted the
// pool was; idle connections give everything lent back; closing them all
// leaves nothing committed.
func TestLending(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g := rapid.IntRange(1, 3).Draw(rt, "g")
		m := &pmodel{
			t: t, g: g,
			cap:   rapid.IntRange(g, 16).Draw(rt, "cap"),
			chunk: rapid.IntRange(1, 8).Draw(rt, "chunk"),
		}
		m.limit = (g+Extra)*2 + rapid.IntRange(0, 40).Draw(rt, "headroom")
		for range rapid.IntRange(0, m.limit/m.chunk).Draw(rt, "floor") {
			m.grow()
		}
		for range rapid.IntRange(1, 6).Draw(rt, "conns") {
			m.join(rapid.IntRange(0, 80).Draw(rt, "want"))
		}
		for range rapid.IntRange(0, 800).Draw(rt, "steps") {
			a := rapid.IntRange(0, 12).Draw(rt, "action")
			if a == 0 {
				m.join(rapid.IntRange(0, 80).Draw(rt, "want"))
				m.check()
				continue
			}
			if a == 1 {
				m.releaseDead()
				m.check()
				continue
			}
			if len(m.conns) == 0 {
				continue
			}
			i := rapid.IntRange(0, len(m.conns)-1).Draw(rt, "conn")
			c := m.conns[i]
			switch a {
			case 2:
				m.send(c)
			case 3:
				m.arriveB(c)
			case 4:
				m.release(c)
			case 5:
				m.arriveA(c)
			case 6:
				m.piggy(c)
			case 7:
				m.giveBack(c)
			case 8:
				m.sendControl(c)
			case 9:
				c.want += rapid.IntRange(0, 20).Draw(rt, "more")
			case 11:
				m.flush(c) // the poller ran for something else (a send's completion)
			case 12:
				m.backB(c)
			case 10:
				if rapid.IntRange(0, 4).Draw(rt, "closeOdds") == 0 {
					// Closing drops what is on the wire: the QP is in ERR.
					m.close(i)
				}
			}
			m.check()
		}
		m.settle()
		// Idle now: give back everything lent, as often as the idle
		// sweep would, and let it arrive.
		for moved := true; moved; {
			moved = false
			for _, c := range m.conns {
				moved = m.giveBack(c) || moved
			}
			m.settle()
		}
		committed := 0
		for _, c := range m.conns {
			if c.win.Max() != m.g || c.led.Recvs() != m.g {
				t.Fatalf("conn %d idle with a window of %d (B: %d), want %d", c.id, c.win.Max(), c.led.Recvs(), m.g)
			}
			committed += m.g + Extra
		}
		if m.pool.Committed() != committed {
			t.Fatalf("idle: %d committed, want %d (g+Extra per connection)", m.pool.Committed(), committed)
		}
		for len(m.conns) > 0 {
			m.close(0)
		}
		for m.releaseDead() {
		}
		if m.pool.Committed() != 0 || m.posted != m.pool.Buffers() {
			t.Fatalf("all closed: %d committed, %d of %d posted", m.pool.Committed(), m.posted, m.pool.Buffers())
		}
	})
}

// TestLendingPostsInTime: one busy connection whose window grows by
// lends, with the receiver's user releasing messages and the poller running
// (for arrivals, and for completions of its own), give-backs both ways and
// the receiver's own messages in any order. However the releases fall into
// posting batches, the sender is never left waiting: the credits a batch
// holds back are never the ones that would reach the credit-only threshold
// (PostBatch).
func TestLendingPostsInTime(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		// The pool starts with just the guaranteed window and control
		// receives (nothing lent from the start): the window grows only
		// by lends, from a pool that grows for them.
		m := &pmodel{t: t, g: 1, cap: rapid.IntRange(4, 32).Draw(rt, "cap"), chunk: 1 + Extra, limit: 128}
		m.grow()
		m.join(rapid.IntRange(1, 300).Draw(rt, "want"))
		c := m.conns[0]
		for range rapid.IntRange(0, 600).Draw(rt, "steps") {
			switch rapid.IntRange(0, 7).Draw(rt, "action") {
			case 0:
				m.send(c)
			case 1:
				m.arriveB(c)
			case 2:
				m.release(c)
			case 3:
				m.arriveA(c)
			case 4:
				m.flush(c)
			case 5:
				m.giveBack(c) // A idled for a moment
			case 6:
				m.backB(c) // B gave back for the other direction
			case 7:
				m.piggy(c) // B sent a message of its own
			}
			m.check()
		}
		m.settle()
	})
}

// TestLendingGrowsUnderLoad: one busy connection over a pool at its floor
// gets lent credits (the pool grows) up to cap, and gives them back idle.
func TestLendingGrowsUnderLoad(t *testing.T) {
	m := &pmodel{t: t, g: 2, cap: 16, chunk: 4, limit: 64}
	m.grow() // exactly g + Extra: nothing spare to start the window with
	if !m.join(200) {
		t.Fatal("join refused")
	}
	c := m.conns[0]
	peak := 0
	for c.want > 0 {
		for m.send(c) {
		}
		for m.arriveB(c) {
		}
		for m.release(c) {
		}
		for m.arriveA(c) {
		}
		m.check()
		peak = max(peak, c.win.Max())
	}
	if peak != m.cap || m.lent == 0 {
		t.Fatalf("window peaked at %d after %d lends, want %d", peak, m.lent, m.cap)
	}
	m.settle()
	if !m.giveBack(c) {
		t.Fatal("an idle connection with lent credits gave nothing back")
	}
	m.settle()
	for m.giveBack(c) {
		m.settle()
	}
	if c.win.Max() != m.g || m.pool.Committed() != m.g+Extra {
		t.Fatalf("after the give-back: window %d, %d committed", c.win.Max(), m.pool.Committed())
	}
}

func TestLendViolations(t *testing.T) {
	w := NewWindow(2)
	if err := w.Lend(MaxLend + 1); err == nil {
		t.Error("a lend beyond MaxLend accepted")
	}
	if err := w.Lend(3); err != nil || w.Max() != 5 || w.Avail() != 5 {
		t.Fatalf("Lend(3): %v, window %d with %d available", err, w.Max(), w.Avail())
	}
	l := NewLedger(2)
	_ = l.Arrived()
	_ = l.Arrived()
	if !l.Exhausted() {
		t.Fatal("not exhausted with both credits used")
	}
	l.Lend(2)
	if _, err := l.TakeBack(1); err == nil {
		t.Error("a give-back of credits not yet told accepted")
	}
	if n := l.TakeLend(); n != 2 {
		t.Fatalf("TakeLend = %d, want 2", n)
	}
	if _, err := l.TakeBack(3); err == nil {
		t.Error("a give-back of the guaranteed window accepted")
	}
	_ = l.Arrived()
	_ = l.Arrived() // 4 of 4 in use
	if _, err := l.TakeBack(1); err == nil {
		t.Error("a give-back of credits in use accepted")
	}
}

// TestGiveBackMeetsUntoldLend: B lends to A, then returns credits on its
// own give-back (which cannot carry the lend), and A, idle, gives back
// while the lend is still untold. A must not be left without credits and
// B below its credit-only threshold. (Found in the guest: TestSharedPoolIdle
// held lent credits for a minute, a window of 5 with 3 untold.)
func TestGiveBackMeetsUntoldLend(t *testing.T) {
	m := &pmodel{t: t, g: 1, cap: 16, chunk: 3, limit: 64}
	m.grow() // just g + Extra: the window starts at g
	if !m.join(0) {
		t.Fatal("join refused")
	}
	c := m.conns[0]
	// A uses its window up: B lends 1, told on the credit-only return.
	c.want = 1
	m.send(c)
	m.handleB(c)
	for m.release(c) {
	}
	m.flush(c)
	m.arriveA(c)
	if c.win.Max() != 2 || c.win.Avail() != 2 {
		t.Fatalf("A's window %d with %d available, want 2 and 2", c.win.Max(), c.win.Avail())
	}
	// A uses the window of 2 up: B lends 2 more, untold yet.
	c.want = 2
	for m.send(c) {
	}
	for m.handleB(c) {
	}
	if c.led.LendOwed() != 2 {
		t.Fatalf("B lent %d untold, want 2", c.led.LendOwed())
	}
	// B's user releases both messages, and each credit goes back on a
	// give-back of B's for the other direction: A holds two again and has
	// heard of no lend.
	for range 2 {
		c.held--
		m.posted++
		c.led.Reposted()
		m.backB(c)
		m.arriveA(c)
		m.check()
	}
	// A idles and gives back what it can spare.
	if !m.giveBack(c) {
		t.Fatalf("A gave nothing back: window %d, %d available", c.win.Max(), c.win.Avail())
	}
	m.arriveB(c)
	m.check()
	// A has more to send: it must get there.
	c.want = 5
	m.settle()
}
