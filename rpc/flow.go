package rpc

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
)

// Per-stream flow control (docs/wire.md, "Flow control"). Every stream
// starts with defaultWindow bytes of credit each way; a receiver with a
// larger window grants the rest with a WINDOW_UPDATE when the stream opens.
// Each MESSAGE frame costs its whole length (header included, so that empty
// messages are not free). A sender may send while its credit is positive,
// so one message larger than the window goes alone.
const defaultWindow = 64 << 10

// Defaults for what a connection buffers for streams nobody reads.
const (
	defaultConnWindow           = 16 << 20
	defaultMaxConcurrentStreams = 4096
)

// inbox is the receiving half of one stream: messages copied out of
// transport memory, waiting for RecvMsg, within the stream's window. The
// reader pushes and never waits; RecvMsg pops and grants the bytes read back
// to the sender.
type inbox struct {
	mu       sync.Mutex
	msgs     [][]byte
	ended    bool  // no more messages will come
	endErr   error // what RecvMsg returns once msgs are drained: io.EOF or a status error
	window   int   // what this side lets the sender have in flight
	inflight int   // bytes received and not yet granted back
	consumed int   // bytes read and not yet granted back
	wake     chan struct{}
}

func (in *inbox) init(window int) {
	in.window = window
	in.wake = make(chan struct{}, 1)
}

// What push did with a message.
type pushResult int

const (
	pushed     pushResult = iota // queued for RecvMsg
	pastWindow                   // the sender had no credit left: a flow-control error
	pushEnded                    // the stream has ended here: nobody will read it
)

// push queues msg, which costs cost bytes of the window. Unless it reports
// pushed, msg is not kept and stays the caller's.
func (in *inbox) push(msg []byte, cost int) pushResult {
	in.mu.Lock()
	if in.inflight >= in.window {
		in.mu.Unlock()
		return pastWindow
	}
	in.inflight += cost
	if in.ended {
		in.mu.Unlock()
		return pushEnded
	}
	in.msgs = append(in.msgs, msg)
	in.mu.Unlock()
	in.signal()
	return pushed
}

// end says no message follows the ones queued; RecvMsg returns err after
// them. The first end wins.
func (in *inbox) end(err error) {
	in.mu.Lock()
	if !in.ended {
		in.ended, in.endErr = true, err
	}
	in.mu.Unlock()
	in.signal()
}

// fail ends the stream with err at once, dropping what is queued; it
// returns the window bytes dropped.
func (in *inbox) fail(err error) int {
	in.mu.Lock()
	dropped := 0
	for _, m := range in.msgs {
		dropped += payloadCost(m)
	}
	in.msgs = nil
	if !in.ended {
		in.ended = true
	}
	in.endErr = err
	in.mu.Unlock()
	in.signal()
	return dropped
}

// queued reports whether messages wait for RecvMsg.
func (in *inbox) queued() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.msgs) > 0
}

// drop ends the stream at once and takes what is queued, for the caller to
// release. When there was something, RecvMsg returns err from now on (the
// end it would have seen after those messages is not the whole story);
// otherwise the end stays as it was.
func (in *inbox) drop(err error) [][]byte {
	in.mu.Lock()
	msgs := in.msgs
	in.msgs = nil
	if !in.ended || len(msgs) > 0 {
		in.ended, in.endErr = true, err
	}
	in.mu.Unlock()
	in.signal()
	return msgs
}

func (in *inbox) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// pop takes the next message, waiting until one comes, the stream ends, or
// done is closed (then it returns nil, nil, false). grant is the window to
// give back to the sender now (0: not yet, to batch updates).
func (in *inbox) pop(done <-chan struct{}, cost func([]byte) int) (msg []byte, grant int, err error, ok bool) {
	for {
		in.mu.Lock()
		if len(in.msgs) > 0 {
			msg = in.msgs[0]
			in.msgs[0] = nil
			in.msgs = in.msgs[1:]
			if len(in.msgs) == 0 {
				in.msgs = nil
			}
			in.consumed += cost(msg)
			// Grant in batches of half a window, so a stream of small
			// messages sends one update per half window, not one each.
			if !in.ended && in.consumed >= in.window/2 {
				grant = min(in.consumed, wire.MaxWindowIncrement)
				in.consumed -= grant
				in.inflight -= grant
			}
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

// ungrant puts back a grant that could not be sent, to go with the next.
func (in *inbox) ungrant(n int) {
	in.mu.Lock()
	in.consumed += n
	in.inflight += n
	in.mu.Unlock()
}

// credit is the sending half of one stream's flow control: what the peer
// lets this side send. It may go negative by the last message sent.
type credit struct {
	mu   sync.Mutex
	n    int64
	wake chan struct{}
}

func (c *credit) init() {
	c.n = defaultWindow
	c.wake = make(chan struct{}, 1)
}

// wait waits until the credit is positive; false when done closed first.
func (c *credit) wait(done <-chan struct{}) bool {
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

// reset gives back the initial window, for a stream opened again.
func (c *credit) reset() {
	c.mu.Lock()
	c.n = defaultWindow
	c.mu.Unlock()
	c.signal()
}

func (c *credit) take(n int) {
	c.mu.Lock()
	c.n -= int64(n)
	c.mu.Unlock()
}

// add takes a WINDOW_UPDATE; it reports false when the credit would pass
// 2^31−1, which no honest receiver grants (a flow-control error).
func (c *credit) add(n uint32) bool {
	c.mu.Lock()
	c.n += int64(n)
	ok := c.n <= wire.MaxWindowIncrement
	c.mu.Unlock()
	c.signal()
	return ok
}

func (c *credit) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// messageCost is what one MESSAGE frame of a payload of n bytes costs of a
// window.
func messageCost(n int) int { return wire.HeaderLen + n }

func payloadCost(b []byte) int { return messageCost(len(b)) }

// The connection window (docs/wire.md, "Flow control"): every MESSAGE frame
// of any stream, and every REQUEST, costs its length of the connection's
// window (a MESSAGE, of its stream's too). Both ends assume defaultWindow
// until the peer's SETTINGS gives its own (CONNECTION_WINDOW).
const connStream = 0

// connFlow is a connection's flow control over all its streams: what the
// peer lets this side send, and what this side owes the peer back.
type connFlow struct {
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

func (f *connFlow) init(window, limit int) {
	f.n = defaultWindow
	f.wake = make(chan struct{})
	f.window = window
	f.limit.Store(int64(limit))
}

// settings is what this side says of its window in its SETTINGS.
func (f *connFlow) settings() uint32 {
	return uint32(min(max(f.window, defaultWindow), wire.MaxWindowIncrement))
}

// peerWindow takes the window the peer's SETTINGS gave (0: it said none,
// the initial one stands).
func (f *connFlow) peerWindow(w uint32) {
	if int(w) > defaultWindow {
		f.add(int64(w) - defaultWindow)
	}
}

// acquire waits until the credit is positive and takes cost of it at once,
// so that of many streams sending together only one can take it below
// zero. false: done closed first, nothing taken.
func (f *connFlow) acquire(done <-chan struct{}, cost int) bool {
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

// add takes a WINDOW_UPDATE for stream 0 (or gives back what a send that
// failed had taken); false when the credit would pass 2^31−1.
func (f *connFlow) add(n int64) bool {
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

// accepts reports whether a MESSAGE may come while held bytes (cost units)
// of the connection wait unread: a compliant sender has less than the
// window in flight plus the one message that took its credit below zero,
// which is at most the largest message this side accepts (larger ones are
// not held). Frames from many streams may arrive in another order than
// their sender took its credit, so the receiver cannot be stricter.
func (f *connFlow) accepts(held int64) bool {
	return held < int64(f.window)+int64(messageCost(int(f.limit.Load())))
}

// allow raises the largest message accepted to n (a call option may raise
// a stream's limit above the connection's).
func (f *connFlow) allow(n int) {
	for {
		was := f.limit.Load()
		if int64(n) <= was || f.limit.CompareAndSwap(was, int64(n)) {
			return
		}
	}
}

// free owes cost bytes back to the peer: a message read, or dropped. It
// returns the grant to send now, in batches of a quarter of the window.
func (f *connFlow) free(cost int) int {
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

// ungrant puts back a grant that could not be queued, to go with the next.
func (f *connFlow) ungrant(n int) {
	f.owedMu.Lock()
	f.owed += n
	f.owedMu.Unlock()
}

// connFree gives cost bytes of the connection window back to the peer,
// once a batch is due.
func (l *link) connFree(cost int) {
	if grant := l.flow.free(cost); grant > 0 && !l.queueControl(wire.AppendWindow(nil, connStream, uint32(grant)), maxQueuedCancels) {
		l.flow.ungrant(grant)
	}
}

// connWindowUpdate takes a WINDOW_UPDATE for stream 0.
func (l *link) connWindowUpdate(body []byte) error {
	n, err := wire.ParseWindow(body)
	if err != nil {
		return err
	}
	if !l.flow.add(int64(n)) {
		return errors.New("flow control: connection window updates past 2^31-1 bytes")
	}
	return nil
}

// errPastConnWindow is the connection error for a peer that sent past the
// connection's window.
var errPastConnWindow = errors.New("flow control: the peer sent past the connection's window")

// take is acquire for sendFrame: nil takes nothing.
func (f *connFlow) take(ctx context.Context, cost int) bool {
	return f == nil || f.acquire(ctx.Done(), cost)
}

// giveBack returns what take took for a frame that was not sent.
func (f *connFlow) giveBack(cost int) {
	if f != nil {
		f.add(int64(cost))
	}
}
