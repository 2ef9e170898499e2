package conn

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// Per-stream flow control (docs/wire.md, "Flow control"). Every stream
// starts with DefaultWindow bytes of credit each way; a receiver with a
// larger window grants the rest with a WINDOW_UPDATE when the stream opens.
// Each MESSAGE frame costs its whole length (header included, so that empty
// messages are not free). A sender may send while its credit is positive,
// so one message larger than the window goes alone.
const DefaultWindow = 64 << 10

// Inbox is the receiving half of one stream: messages copied out of
// transport memory, waiting for RecvMsg, within the stream's window. The
// reader pushes and never waits; RecvMsg pops and grants the bytes read back
// to the sender.
type Inbox struct {
	mu       sync.Mutex
	msgs     [][]byte // msgs[head:] wait; the array is kept for the next ones
	head     int
	ended    bool  // no more messages will come
	endErr   error // what RecvMsg returns once msgs are drained: io.EOF or a status error
	window   int   // what this side lets the sender have in flight
	maxAuto  int   // how far the window may grow by itself (Grow); at most window: it does not
	inflight int   // bytes received and not yet granted back
	consumed int   // bytes read and not yet granted back
	wake     chan struct{}
	// look is what Queued and Settled see without the lock, which the
	// reader and RecvMsg contend for: the count of messages waiting,
	// plus lookEnded once ended; set with mu held at every change.
	look atomic.Int64
}

const lookEnded = 1 << 40

// setLookLocked publishes what waits and whether the stream ended.
// Called with in.mu held.
func (in *Inbox) setLookLocked() {
	v := int64(len(in.msgs) - in.head)
	if in.ended {
		v |= lookEnded
	}
	in.look.Store(v)
}

// keptInbox is the most queued messages whose array an Inbox keeps once
// it is drained.
const keptInbox = 16

func (in *Inbox) Init(window int) {
	in.window = window
	in.maxAuto = window
	in.wake = make(chan struct{}, 1)
}

// Grow lets the window grow by itself up to max: a message of more than a
// quarter of the window, once read, raises the window to four such
// messages (at least twice the window), so a stream of large messages
// keeps several in flight instead of waiting a round trip for each grant
// (a 64 KiB message in a 64 KiB window: one message per round trip). The
// growth is granted to the sender with the next update. gRPC-go grows its
// windows from a measured bandwidth-delay product; this needs no
// measurement and stays within max per stream (and the connection's
// window for all of them).
func (in *Inbox) Grow(max int) {
	in.maxAuto = max
}

// What push did with a message.
type PushResult int

const (
	Pushed     PushResult = iota // queued for RecvMsg
	PastWindow                   // the sender had no Credit left: a flow-control error
	PushEnded                    // the stream has ended here: nobody will read it
)

// Push queues msg, which costs cost bytes of the window. Unless it reports
// Pushed, msg is not kept and stays the caller's.
func (in *Inbox) Push(msg []byte, cost int) PushResult {
	in.mu.Lock()
	if in.inflight >= in.window {
		in.mu.Unlock()
		return PastWindow
	}
	in.inflight += cost
	if in.ended {
		in.mu.Unlock()
		return PushEnded
	}
	if len(in.msgs) == cap(in.msgs) && in.head > 0 && 2*in.head >= len(in.msgs) {
		// Full, and at least half of it taken: move the waiting ones down
		// rather than grow an array that never drains (growing copies
		// the taken ones too, so the array stays within 4 times what
		// waits).
		n := copy(in.msgs, in.msgs[in.head:])
		clear(in.msgs[n:])
		in.msgs, in.head = in.msgs[:n], 0
	}
	in.msgs = append(in.msgs, msg)
	in.setLookLocked()
	in.mu.Unlock()
	in.Signal()
	return Pushed
}

// End says no message follows the ones queued; RecvMsg returns err after
// them. The first end wins.
func (in *Inbox) End(err error) {
	in.mu.Lock()
	if !in.ended {
		in.ended, in.endErr = true, err
	}
	in.setLookLocked()
	in.mu.Unlock()
	in.Signal()
}

// Fail ends the stream with err at once, dropping what is queued; it
// returns the window bytes dropped.
func (in *Inbox) Fail(err error) int {
	in.mu.Lock()
	dropped := 0
	for _, m := range in.msgs[in.head:] {
		dropped += PayloadCost(m)
	}
	in.msgs, in.head = nil, 0
	if !in.ended {
		in.ended = true
	}
	in.endErr = err
	in.setLookLocked()
	in.mu.Unlock()
	in.Signal()
	return dropped
}

// Queued reports whether messages wait for RecvMsg.
func (in *Inbox) Queued() bool { return in.look.Load()&(lookEnded-1) > 0 }

// Settled reports whether Pop would not wait: a message waits, or the
// stream has ended.
func (in *Inbox) Settled() bool { return in.look.Load() != 0 }

// Drop ends the stream at once and takes what is queued, for the caller to
// release. When there was something, RecvMsg returns err from now on (the
// End it would have seen after those messages is not the whole story);
// otherwise the end stays as it was.
func (in *Inbox) Drop(err error) [][]byte {
	in.mu.Lock()
	msgs := in.msgs[in.head:]
	in.msgs, in.head = nil, 0
	if !in.ended || len(msgs) > 0 {
		in.ended, in.endErr = true, err
	}
	in.setLookLocked()
	in.mu.Unlock()
	in.Signal()
	return msgs
}

// DropAll ends the stream with err at once, whatever ended it before, and
// takes what is queued, for the caller to release.
func (in *Inbox) DropAll(err error) [][]byte {
	in.mu.Lock()
	msgs := in.msgs[in.head:]
	in.msgs, in.head = nil, 0
	in.ended, in.endErr = true, err
	in.setLookLocked()
	in.mu.Unlock()
	in.Signal()
	return msgs
}

func (in *Inbox) Signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// Pop takes the next message, waiting until one comes, the stream ends, or
// done is closed (then it returns nil, nil, false). grant is the window to
// give back to the sender now (0: not yet, to batch updates).
func (in *Inbox) Pop(done <-chan struct{}, cost func([]byte) int) (msg []byte, grant int, err error, ok bool) {
	for {
		in.mu.Lock()
		if len(in.msgs) > in.head {
			msg = in.msgs[in.head]
			in.msgs[in.head] = nil
			in.head++
			if in.head == len(in.msgs) {
				// Keep the array for the next messages (one allocation
				// per stream, not one per message), unless a burst grew it.
				in.msgs, in.head = in.msgs[:0], 0
				if cap(in.msgs) > keptInbox {
					in.msgs = nil
				}
			}
			c := cost(msg)
			in.consumed += c
			extra := 0
			if 4*c > in.window && in.window < in.maxAuto && !in.ended {
				nw := min(max(4*c, 2*in.window), in.maxAuto)
				extra, in.window = nw-in.window, nw
			}
			// Grant in batches of half a window, so a stream of small
			// messages sends one update per half window, not one each.
			if !in.ended && in.consumed >= in.window/2 {
				grant = min(in.consumed, wire.MaxWindowIncrement)
				in.consumed -= grant
				in.inflight -= grant
			}
			grant = min(grant+extra, wire.MaxWindowIncrement)
			in.setLookLocked()
			in.mu.Unlock()
			return msg, grant, nil, true
		}
		if in.ended {
			err := in.endErr
			in.mu.Unlock()
			return nil, 0, err, true
		}
		in.mu.Unlock()
		select {
		case <-in.wake:
		case <-done:
			return nil, 0, nil, false
		}
	}
}

// Ungrant puts back a grant that could not be sent, to go with the next.
func (in *Inbox) Ungrant(n int) {
	in.mu.Lock()
	in.consumed += n
	in.inflight += n
	in.mu.Unlock()
}

// Credit is the sending half of one stream's flow control: what the peer
// lets this side send. It may go negative by the last message sent.
type Credit struct {
	mu   sync.Mutex
	n    int64
	wake chan struct{}
}

func (c *Credit) Init() {
	c.n = DefaultWindow
	c.wake = make(chan struct{}, 1)
}

// Wait waits until the credit is positive; false when done closed first.
func (c *Credit) Wait(done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		ok := c.n > 0
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.wake:
		case <-done:
			return false
		}
	}
}

// Open reports whether a send would not wait: the credit is positive.
func (c *Credit) Open() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

// Reset gives back the initial window, for a stream opened again.
func (c *Credit) Reset() {
	c.mu.Lock()
	c.n = DefaultWindow
	c.mu.Unlock()
	c.Signal()
}

func (c *Credit) Take(n int) {
	c.mu.Lock()
	c.n -= int64(n)
	c.mu.Unlock()
}

// Add takes a WINDOW_UPDATE; it reports false when the credit would pass
// 2^31−1, which no honest receiver grants (a flow-control error).
func (c *Credit) Add(n uint32) bool {
	c.mu.Lock()
	c.n += int64(n)
	ok := c.n <= wire.MaxWindowIncrement
	c.mu.Unlock()
	c.Signal()
	return ok
}

func (c *Credit) Signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// MessageCost is what one MESSAGE frame of a payload of n bytes costs of a
// window.
func MessageCost(n int) int { return wire.HeaderLen + n }

func PayloadCost(b []byte) int { return MessageCost(len(b)) }

// The connection window (docs/wire.md, "Flow control"): every MESSAGE frame
// of any stream, and every REQUEST, costs its length of the connection's
// window (a MESSAGE, of its stream's too). Both ends assume DefaultWindow
// until the peer's SETTINGS gives its own (CONNECTION_WINDOW).
const ConnStream = 0

// ConnFlow is a connection's flow control over all its streams: what the
// peer lets this side send, and what this side owes the peer back.
type ConnFlow struct {
	// The sending half. Many streams wait on it, so a change wakes them
	// all: wake is closed and replaced whenever the credit turns positive.
	mu   sync.Mutex
	n    int64
	wake chan struct{}

	// The receiving half. window is what this side advertises; owed the
	// bytes of MESSAGE frames read or dropped and not yet granted back.
	window int
	owedMu sync.Mutex
	owed   int
	limit  atomic.Int64 // the largest message a stream of this link accepts
}

// Credit is what the peer lets this side send now, over all streams.
func (f *ConnFlow) Credit() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *ConnFlow) Init(window, limit int) {
	f.n = DefaultWindow
	f.wake = make(chan struct{})
	f.window = window
	f.limit.Store(int64(limit))
}

// Settings is what this side says of its window in its SETTINGS.
func (f *ConnFlow) Settings() uint32 {
	return uint32(min(max(f.window, DefaultWindow), wire.MaxWindowIncrement))
}

// PeerWindow takes the window the peer's SETTINGS gave (0: it said none,
// the initial one stands).
func (f *ConnFlow) PeerWindow(w uint32) {
	if int(w) > DefaultWindow {
		f.Add(int64(w) - DefaultWindow)
	}
}

// Acquire waits until the credit is positive and takes cost of it at once,
// so that of many streams sending together only one can take it below
// zero. false: done closed first, nothing taken.
func (f *ConnFlow) Acquire(done <-chan struct{}, cost int) bool {
	for {
		f.mu.Lock()
		if f.n > 0 {
			f.n -= int64(cost)
			f.mu.Unlock()
			return true
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-done:
			return false
		}
	}
}

// Add takes a WINDOW_UPDATE for stream 0 (or gives back what a send that
// failed had taken); false when the credit would pass 2^31−1.
func (f *ConnFlow) Add(n int64) bool {
	f.mu.Lock()
	was := f.n
	f.n += n
	ok := f.n <= wire.MaxWindowIncrement
	if was <= 0 && f.n > 0 {
		close(f.wake)
		f.wake = make(chan struct{})
	}
	f.mu.Unlock()
	return ok
}

// Accepts reports whether a MESSAGE may come while held bytes (cost units)
// of the connection wait unread: a compliant sender has less than the
// window in flight plus the one message that took its credit below zero,
// which is at most the largest message this side accepts (larger ones are
// not held). Frames from many streams may arrive in another order than
// their sender took its credit, so the receiver cannot be stricter.
func (f *ConnFlow) Accepts(held int64) bool {
	return held < int64(f.window)+int64(MessageCost(int(f.limit.Load())))
}

// Allow raises the largest message accepted to n (a call option may raise
// a stream's limit above the connection's).
func (f *ConnFlow) Allow(n int) {
	for {
		was := f.limit.Load()
		if int64(n) <= was || f.limit.CompareAndSwap(was, int64(n)) {
			return
		}
	}
}

// Free owes cost bytes back to the peer: a message read, or dropped. It
// returns the grant to send now, in batches of a quarter of the window.
func (f *ConnFlow) Free(cost int) int {
	f.owedMu.Lock()
	defer f.owedMu.Unlock()
	f.owed += cost
	if f.owed < f.window/4 {
		return 0
	}
	grant := min(f.owed, wire.MaxWindowIncrement)
	f.owed -= grant
	return grant
}

// Ungrant puts back a grant that could not be queued, to go with the next.
func (f *ConnFlow) Ungrant(n int) {
	f.owedMu.Lock()
	f.owed += n
	f.owedMu.Unlock()
}

// Take is acquire for sendFrame: nil takes nothing.
func (f *ConnFlow) Take(ctx context.Context, cost int) bool {
	return f == nil || f.Acquire(ctx.Done(), cost)
}

// GiveBack returns what take took for a frame that was not sent.
func (f *ConnFlow) GiveBack(cost int) {
	if f != nil {
		f.Add(int64(cost))
	}
}
