package rpc

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/transport"
)

// admission is a server connection's admission of requests, in one place:
// every REQUEST the reader reads enters through request, which decides,
// never waiting, whether its call starts now in a free call slot
// (MaxConcurrentCalls, and the response budget's estimate), waits in the
// queue (within MaxQueuedRequestBytes), or is refused; and where a call
// that starts runs: on the reader (runInline: after handing the reading to
// an idle worker, or, a call alone on a transport that reports arrivals,
// without handing it on, unreadTurn), on a worker, or on a goroutine of its
// own (workers.run). A call's goroutine keeps its slot and takes the next
// queued call when it is done (run). It also counts what is open against
// MaxConcurrentStreams, streams included, so its lock guards the stream
// table too (serverstream.go's openStream takes it).
type admission struct {
	l *serverLink

	mu          sync.Mutex
	calls       map[uint64]*callStream   // running or queued
	streams     map[uint64]*serverStream // open streams
	open        int                      // calls and streams counted against MaxConcurrentStreams
	running     int                      // call slots taken
	queue       list.List                // of *callStream waiting for a slot, oldest first
	queuedBytes int

	// The reader's alone.
	inline      *callStream // admitted by this dispatch, for runInline
	inlineAlone bool        // inline is alone on the link, and so was the call before
	lastAlone   bool        // the last call admitted was alone
	unread      unreadTurn  // the reading while the reader runs a call without handing it on
}

func (a *admission) init(l *serverLink) {
	a.l = l
	a.calls = make(map[uint64]*callStream)
	a.streams = make(map[uint64]*serverStream)
	a.unread.init(l)
}

// request is the one entry of an arriving REQUEST frame b (body is its
// body): it charges the connection window (a request holds it until its
// call is over, so what a client has the server hold is bounded), decodes
// the request (newStream) and admits it. It reports false when the link
// is closing.
func (a *admission) request(id uint64, body []byte, b transport.Buffer) bool {
	l := a.l
	if !l.Flow.Accepts(l.held.Load()) {
		b.Release()
		l.fatal(errPastConnWindow)
		return false
	}
	cost := b.Len()
	l.held.Add(int64(cost))
	st := l.newStream(id, body, b)
	st.window = cost
	return a.admit(st)
}

// runInline runs the call request admitted last on the reader, the
// reading handed to an idle worker first: the call starts without waiting
// for a goroutine to wake up, and the worker's wake-up happens while it
// runs (brpc runs the last message it read in place too). A call alone on
// the connection, after one alone too, runs without handing the reading
// on first, unless something arrives meanwhile (unreadTurn). With no
// worker idle the call goes to workers.run. It reports whether the caller
// still reads: false when the reading was handed on, the caller then
// becoming a worker (readOn).
func (a *admission) runInline() bool {
	st := a.inline
	a.inline = nil
	if a.inlineAlone {
		if ran, reading := a.unread.run(st); ran {
			return reading
		}
	}
	if a.l.s.workers.read(a.l) {
		a.run(st)
		return false
	}
	a.l.s.workers.run(a.l, st)
	return true
}

// admit starts st in a free call slot, or queues it until one frees, or,
// when the queue's byte bound is reached, refuses it: the client may send
// it again since it never ran. It never waits. It reports false when the
// link is closing.
func (a *admission) admit(st *callStream) bool {
	a.mu.Lock()
	if _, dup := a.calls[st.id]; dup || a.streams[st.id] != nil {
		a.mu.Unlock()
		st.frame.Release()
		a.l.fatal(fmt.Errorf("call id %d is already in use", st.id))
		return false
	}
	if a.open >= a.l.s.opts.maxStreams {
		// Over the limit the server's SETTINGS gave: the client did not
		// wait for a slot.
		a.mu.Unlock()
		st.frame.Release()
		a.requestDone(st)
		return a.refuse(st.id)
	}
	if !a.mayStartLocked(st) {
		return a.enqueue(st)
	}
	a.running++
	a.open++
	st.counted = true
	a.calls[st.id] = st
	a.startLocked(st)
	// Alone: no other call, nor stream, on the link (a call leaves calls
	// before its response is sent, so the call before this one has,
	// however soon this one came).
	alone := len(a.calls) == 1 && len(a.streams) == 0
	a.mu.Unlock()
	a.l.wg.Add(1)
	a.inlineAlone = alone && a.lastAlone
	a.lastAlone = alone
	// Whatever its size: the reader's and the workers' stacks have grown
	// already, where a fresh goroutine's would grow again under protobuf's
	// decoding at every call (a third of the server's instructions per
	// 64 KiB call under callgrind).
	a.inline = st // runInline runs it, after this dispatch
	return true
}

// mayStartLocked reports whether st may start now, and if so reserves its
// method's response estimate (conn.RespEstimate) of the response budget: a call
// slot is free, no response waits for the budget (its response could not
// leave either), and the responses of the calls running, as estimated,
// leave room for st's. A call always starts when none runs. Called with
// a.mu held.
func (a *admission) mayStartLocked(st *callStream) bool {
	if a.running > 0 && (a.running >= max(1, a.l.s.opts.maxConcurrentCalls) || a.l.budget.Waiting()) {
		return false
	}
	n := conn.MinResponseEstimate
	if st.est != nil {
		n = st.est.Get()
	}
	if !a.l.budget.TryReserve(n, a.running == 0) {
		return false
	}
	st.resv = n
	return true
}

// unreserve gives st's reservation back: its response is about to take its
// actual size of the budget, or it will send none.
func (a *admission) unreserve(st *callStream) {
	if st.resv > 0 {
		a.l.budget.Release(st.resv)
		st.resv = 0
	}
}

// enqueue puts st in the queue for a call slot (a.mu held, and let go), or
// refuses it when the queue's bytes are full.
func (a *admission) enqueue(st *callStream) bool {
	if a.queuedBytes > 0 && a.queuedBytes+st.cost > a.l.s.opts.maxQueuedBytes {
		a.mu.Unlock()
		st.frame.Release()
		a.requestDone(st)
		return a.refuse(st.id)
	}
	if st.frame.Len() > 0 {
		// Queued requests leave transport memory (a registered receive
		// buffer, a credit), so the transport keeps delivering.
		frame := append([]byte(nil), st.frame.Bytes()...)
		st.req.Payload = frame[len(frame)-len(st.req.Payload):]
		st.frame.Release()
		st.frame = transport.NewBuffer(frame, nil, 0)
	}
	st.elem = a.queue.PushBack(st)
	a.queuedBytes += st.cost
	a.open++
	st.counted = true
	a.calls[st.id] = st
	a.mu.Unlock()
	return true
}

// refuse answers call id with Unavailable and the refusal mark (docs/wire.md)
// from the control goroutine (queueOrClose).
func (a *admission) refuse(id uint64) bool {
	return a.l.queueOrClose(wire.AppendResponseHead(nil, id, uint32(codes.Unavailable), refusedMessage, nil, nil, refusedTrailer))
}

// uncount stops counting st against MaxConcurrentStreams, once: before its
// response leaves (so that the client, which frees its slot when the
// response arrives, never finds the server still counting it), or when the
// client cancelled it. Called with a.mu held.
func (a *admission) uncountLocked(counted *bool) {
	if *counted {
		*counted = false
		a.open--
	}
}

// startLocked marks st running, so that the link's close ends its
// context; called with a.mu held.
func (a *admission) startLocked(st *callStream) {
	st.started = true
	st.elem = nil
}

// cancelRunning ends the contexts of the calls still running once the
// link has closed (the reader has stopped, so no call starts after it:
// run starts none on a closed link).
func (a *admission) cancelRunning() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, st := range a.calls {
		if st.started {
			st.end(context.Canceled)
		}
	}
}

// cancelStream handles a CANCEL: a running call's context is cancelled; a
// queued one is dropped before it starts (the client no longer waits for
// its response).
func (a *admission) cancel(id uint64) {
	a.mu.Lock()
	st := a.calls[id]
	if st == nil {
		a.mu.Unlock()
		return
	}
	a.uncountLocked(&st.counted) // the client freed its slot when it sent the CANCEL
	if st.elem != nil {
		a.queue.Remove(st.elem)
		st.elem = nil
		a.queuedBytes -= st.cost
		delete(a.calls, id)
		a.mu.Unlock()
		st.frame.Release()
		a.requestDone(st)
		return
	}
	a.mu.Unlock()
	st.end(context.Canceled)
}

// requestDone gives the connection window st's request took back to the
// client, once: its call is over (or never ran).
func (a *admission) requestDone(st *callStream) {
	if st.window > 0 {
		a.l.release(st.window)
		st.window = 0
	}
}

// run serves st, then the queued streams, one after another, until
// the queue is empty: the goroutine keeps its call slot.
func (a *admission) run(st *callStream) {
	defer a.l.wg.Done()
	for st != nil {
		a.l.serveStream(st)
		a.mu.Lock()
		st = nil
		a.running-- // this call's slot, which the next one queued may take
		if a.l.Ctx.Err() == nil {
			if e := a.queue.Front(); e != nil && a.mayStartLocked(e.Value.(*callStream)) {
				st = a.queue.Remove(e).(*callStream)
				a.queuedBytes -= st.cost
				a.startLocked(st)
				a.running++
			}
		}
		a.mu.Unlock()
	}
}

// dropQueue forgets the queued streams of a closed link; called with a.mu
// held.
func (a *admission) dropQueue() {
	for e := a.queue.Front(); e != nil; e = a.queue.Front() {
		st := a.queue.Remove(e).(*callStream)
		st.frame.Release()
		delete(a.calls, st.id)
	}
	a.queuedBytes = 0
}
