package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/encoding"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// serverStream is one stream on a server connection, and the ServerStream
// its handler gets. The reader feeds its inbox and credit; the handler's
// goroutine sends.
type serverStream struct {
	l      *serverLink
	id     uint64
	method string
	desc   *StreamDesc
	unary  bool // desc serves a unary method (NewStream on it): no stream interceptor
	svc    *service
	sc     *serverCall         // header and trailer, shared with SetHeader(ctx)
	comp   encoding.Compressor // the client's; nil: none
	// sendComp is what the stream's messages are compressed with (nil:
	// not), fixed when the header goes: the client's compressor unless
	// the handler chose another (SetSendCompressor).
	sendComp encoding.Compressor
	ctx      context.Context
	cancel   context.CancelFunc

	in   conn.Inbox
	out  conn.Credit
	lent []byte // the last message RecvMsg decoded lending its bytes; nil: none
	// readRun: the connection's reading is lent to the handler, as the
	// run of this number of the connection's unread time
	// (admission.unread); 0: not. See lendReading.
	readRun atomic.Uint64
	// lendMu is held by the reader from a message's push until its lend
	// is decided (streamMessage, endLend); lending says so.
	lendMu  sync.Mutex
	lending atomic.Bool
	// recvCtx is the standard context under ctx, which ends with it: a
	// transport's Recv watches its end without a select (tcp:// reads
	// the socket in the Recv itself only so).
	recvCtx context.Context
	// skipLend: the messages the reader gives the handler lending it no
	// reading, after a flood showed (a lend handed on before the handler
	// read with it, or the next frame there already).
	skipLend conn.Backoff
	// returning: the handler has returned; no reading is lent to it any
	// more (lendReading, giveReadingBack). Guarded by lendMu.
	returning bool

	// Owned by the reader (under l.adm.mu): what the client did.
	halfClosed bool
	reset      bool // ended by a RESET either way: no TRAILERS follow
	counted    bool // counted in l.adm.open

	mu         sync.Mutex // the handler's side
	headerSent bool
	// trailersSent: the stream's end is decided; the TRAILERS went or are
	// going (at the handler's return, or early by endEarly).
	trailersSent atomic.Bool
}

// openStream handles an OPEN: it starts the stream's handler, or answers
// at once with TRAILERS when it cannot run (malformed, unknown method, too
// many streams). It reports false when the link is closing.
func (l *serverLink) openStream(h wire.Header, body []byte) bool {
	req, err := wire.ParseOpen(body, l.s.opts.maxHeaderListSize)
	var fail *status.Status
	var svc *service
	var desc *StreamDesc
	var unary bool
	var comp encoding.Compressor
	switch {
	case errors.Is(err, wire.ErrMetadataTooLarge):
		fail = status.Newf(codes.ResourceExhausted, "stream %v", err)
	case err != nil:
		l.s.peerLog.warn("malformed open frame", zap.Stringer("peer", l.peer.Addr), zap.Uint64("stream", h.CallID), zap.Error(err))
		fail = status.Newf(codes.Internal, "malformed open frame: %v", err)
	default:
		svc, desc, unary = l.lookupStream(req.Method)
		var encName string
		var encOK bool
		comp, encName, encOK = takeEncoding(req.MD)
		switch {
		case desc == nil:
			l.s.peerLog.warn("unknown streaming method", zap.Stringer("peer", l.peer.Addr), zap.String("method", req.Method))
			fail = status.Convert(l.unknownMethod(req.Method, svc))
		case !encOK:
			fail = status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", encName)
		}
	}
	l.adm.mu.Lock()
	if _, dup := l.adm.calls[h.CallID]; dup || l.adm.streams[h.CallID] != nil {
		l.adm.mu.Unlock()
		l.fatal(fmt.Errorf("stream id %d is already in use", h.CallID))
		return false
	}
	if fail == nil && l.adm.open >= l.s.opts.maxStreams {
		// Over the limit the server's SETTINGS gave: the client did not
		// wait for a slot. What follows on the id is dropped.
		l.adm.mu.Unlock()
		l.refusedIDs.add(h.CallID)
		frame := wire.AppendTrailers(nil, h.CallID, uint32(codes.Unavailable), "server busy: too many streams on this connection", nil, nil, refusedTrailer)
		return l.queueOrClose(frame)
	}
	if fail != nil {
		l.adm.mu.Unlock()
		return l.queueOrClose(wire.AppendTrailers(nil, h.CallID, uint32(fail.Code()), fail.Message(), nil, nil, nil))
	}
	ss := &serverStream{l: l, id: h.CallID, method: req.Method, desc: desc, unary: unary, svc: svc,
		sc: &serverCall{method: req.Method, comp: comp, accept: l.acceptEncoding(req.MD)}, comp: comp}
	ss.sc.stream = ss
	l.s.opts.initInbox(&ss.in)
	ss.out.Init()
	ctx, cancel := context.WithCancel(l.Ctx)
	if req.Timeout > 0 {
		ctx, cancel = contextWithTimeout(ctx, cancel, req.Timeout)
	}
	ss.recvCtx = ctx
	ctx = &callContext{Context: ctx, sc: ss.sc, peer: l.peer, l: l, raw: req.MD, ua: l.userAgent(req.MD)}
	if hs := l.s.opts.statsHandlers; len(hs) > 0 {
		md, _ := metadata.FromIncomingContext(ctx) // completed, as the handler will see it
		name := ""
		if comp != nil {
			name = comp.Name()
		}
		ctx, ss.sc.stats = beginServerRPC(ctx, hs, l.stats, req.Method, desc, name, md, len(body)+wire.HeaderLen, l.peer)
	}
	ss.ctx, ss.cancel = ctx, cancel
	l.adm.streams[h.CallID] = ss
	l.adm.open++
	ss.counted = true
	l.chzCallStarted()
	l.wg.Add(1)
	l.adm.mu.Unlock()
	if extra := l.s.opts.window - defaultWindow; extra > 0 {
		// A larger window is a speed-up, not a promise: with the control
		// queue full the stream keeps the initial window, and RecvMsg's
		// grants still come.
		l.QueueControl(wire.AppendWindow(nil, h.CallID, uint32(min(extra, wire.MaxWindowIncrement))), l.peerCtlLimit())
	}
	go ss.run()
	return true
}

// contextWithTimeout adds a deadline to ctx, whose cancel is parent's.
func contextWithTimeout(ctx context.Context, parent context.CancelFunc, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, func() { cancel(); parent() }
}

// queueOrClose sends frame, an answer the client must get (a refusal, a
// stream's RESET or failure, the connection window), from the control
// goroutine. These are bounded by the stream limit (peerCtlLimit): a client
// that overflows them sends past MAX_CONCURRENT_STREAMS or reads none of
// them, and its connection is closed with a GOAWAY that says so.
func (l *serverLink) queueOrClose(frame []byte) bool {
	if l.QueueControl(frame, l.peerCtlLimit()) {
		return true
	}
	st := status.New(codes.ResourceExhausted, "the client sends past MAX_CONCURRENT_STREAMS, or reads none of the server's answers")
	ctx, cancel := context.WithTimeout(l.Ctx, time.Second)
	_ = l.Conn.Send(ctx, wire.AppendGoAway(nil, uint32(st.Code()), st.Message()))
	cancel()
	if l.Close(st) {
		l.s.peerLog.warn("closing connection", zap.Stringer("peer", l.peer.Addr), zap.String("reason", st.Message()))
	}
	return false
}

// peerCtlLimit bounds the control frames the client's own doing may leave
// waiting: a client that keeps to MaxConcurrentStreams is owed at most one
// refusal, or one RESET and one opening grant, per call or stream it counts
// as open, and the server never closes it for them.
func (l *serverLink) peerCtlLimit() int { return 2*l.s.opts.maxStreams + 64 }

// lookupStream finds the handler of a stream opened on method; unary
// reports a unary method's, which runs the unary interceptor and not the
// stream one.
func (l *serverLink) lookupStream(method string) (svc *service, desc *StreamDesc, unary bool) {
	svc, _ = l.lookup(method)
	_, m, _ := cutMethod(method)
	if svc != nil {
		if d := svc.streams[m]; d != nil {
			return svc, d, false
		}
		if md := svc.methods[m]; md != nil {
			// A unary method opened as a stream (cc.NewStream), as
			// gRPC-go serves it: one request, one response, and the
			// unary interceptor.
			return svc, &StreamDesc{StreamName: m, Handler: unaryAsStream(md, l.s.interceptor)}, true
		}
	}
	if h := l.s.opts.unknownHandler; h != nil {
		return unknownService, &StreamDesc{StreamName: m, Handler: h, ClientStreams: true, ServerStreams: true}, false
	}
	return svc, nil, false
}

// unknownService is the service of the methods UnknownServiceHandler
// serves: it has no implementation.
var unknownService = &service{}

// unknownAsUnary serves a unary call (a REQUEST) to an unregistered method
// with UnknownServiceHandler's h, on a stream of one message each way,
// through the stream interceptor ic (nil: none), as gRPC-go serves it.
func unknownAsUnary(h StreamHandler, ic StreamServerInterceptor, method string) *MethodDesc {
	return &MethodDesc{MethodName: method, Handler: func(srv any, ctx context.Context, dec func(any) error, _ UnaryServerInterceptor) (any, error) {
		us := &unaryServerStream{ctx: ctx, dec: dec}
		var err error
		if ic != nil {
			err = ic(srv, us, &StreamServerInfo{FullMethod: method, IsClientStream: true, IsServerStream: true}, h)
		} else {
			err = h(srv, us)
		}
		if err != nil {
			return nil, err
		}
		if us.resp == nil {
			return nil, status.Errorf(codes.Internal, "the unknown service handler sent no response for %s", method)
		}
		return us.resp, nil
	}}
}

// unaryServerStream is a unary call seen as a ServerStream: its request is
// the one message RecvMsg returns, the one message SendMsg takes is its
// response.
type unaryServerStream struct {
	ctx      context.Context
	dec      func(any) error
	received bool
	resp     any
}

func (u *unaryServerStream) Context() context.Context        { return u.ctx }
func (u *unaryServerStream) SetHeader(md metadata.MD) error  { return SetHeader(u.ctx, md) }
func (u *unaryServerStream) SendHeader(md metadata.MD) error { return SendHeader(u.ctx, md) }
func (u *unaryServerStream) SetTrailer(md metadata.MD)       { _ = SetTrailer(u.ctx, md) }

func (u *unaryServerStream) RecvMsg(m any) error {
	if u.received {
		return io.EOF
	}
	u.received = true
	return u.dec(m)
}

func (u *unaryServerStream) SendMsg(m any) error {
	if u.resp != nil {
		return status.Error(codes.Internal, "SendMsg called twice on a unary call's stream")
	}
	u.resp = m
	return nil
}

// unaryAsStream serves unary method md on a stream: the request is the
// stream's one message, the response its one message back.
func unaryAsStream(md *MethodDesc, ic UnaryServerInterceptor) StreamHandler {
	return func(srv any, ss ServerStream) error {
		dec := func(v any) error {
			err := ss.RecvMsg(v)
			if err == io.EOF {
				return status.Error(codes.Internal, "cardinality violation: received no request message from non-client-streaming RPC")
			}
			return err
		}
		resp, err := md.Handler(srv, ss.Context(), dec, ic)
		if err != nil {
			return err
		}
		if resp == nil {
			return status.Errorf(codes.Internal, "handler for %s returned neither a response nor an error", md.MethodName)
		}
		return ss.SendMsg(resp)
	}
}

// streamFrame handles a frame for an open stream: MESSAGE, CLOSE_SEND,
// RESET or WINDOW_UPDATE. Frames for a stream the server does not have
// (never opened, or already ended here) are answered with a RESET when
// they carry data, and ignored otherwise (a RESET or WINDOW_UPDATE may
// cross the stream's end). It reports false when the link is closing.
func (l *serverLink) streamFrame(h wire.Header, body []byte, b transport.Buffer) bool {
	defer b.Release()
	if h.Kind == wire.KindMessage {
		// Every MESSAGE costs the connection's window, whatever becomes
		// of it: what is not held is given back at once.
		if !l.Flow.Accepts(l.held.Load()) {
			l.fatal(errPastConnWindow)
			return false
		}
		if !l.streamMessage(h, body, &b) {
			l.ConnFree(conn.MessageCost(len(body)))
		}
		return l.Ctx.Err() == nil
	}
	if h.Kind == wire.KindWindow && h.CallID == conn.ConnStream {
		if err := l.ConnWindowUpdate(body); err != nil {
			l.fatal(err)
			return false
		}
		return true
	}
	l.adm.mu.Lock()
	ss := l.adm.streams[h.CallID]
	reset := ss != nil && ss.reset
	l.adm.mu.Unlock()
	if reset || ss == nil && l.refusedIDs.has(h.CallID) {
		return true // the client has been told; what crossed the RESET or refusal is dropped
	}
	switch h.Kind {
	case wire.KindCloseSend:
		if err := wire.ParseCloseSend(body); err != nil {
			l.fatal(err)
			return false
		}
		if ss == nil {
			return l.notOpen(h)
		}
		l.adm.mu.Lock()
		second := ss.halfClosed
		ss.halfClosed = true
		l.adm.mu.Unlock()
		if second {
			return l.streamError(ss, status.New(codes.Internal, "second half-close on the stream"))
		}
		ss.in.End(io.EOF)
	case wire.KindReset:
		r, err := wire.ParseReset(body)
		if err != nil {
			l.fatal(err)
			return false
		}
		if ss != nil {
			l.adm.mu.Lock()
			ss.reset = true
			l.adm.uncountLocked(&ss.counted) // the client freed its slot when it sent the RESET
			l.adm.mu.Unlock()
			// The context first: a handler whose RecvMsg fails finds it
			// ended, and can tell a cancel from a broken stream.
			ss.cancel()
			l.release(ss.in.Fail(status.New(codes.Code(r.Code), "stream reset by the client: "+r.Message).Err()))
		}
	case wire.KindWindow:
		n, err := wire.ParseWindow(body)
		if err != nil {
			l.fatal(err)
			return false
		}
		if ss != nil && !ss.out.Add(n) {
			return l.streamError(ss, status.New(codes.Internal, "flow control: window updates past 2^31-1 bytes"))
		}
	}
	return true
}

// streamMessage takes a MESSAGE: copied out of transport memory (so that,
// on rdma://, the receive buffer and its credit go back at once) into its
// stream's inbox, within the stream's window. It reports whether the
// message is held; the caller gives the connection window of one that is
// not back.
func (l *serverLink) streamMessage(h wire.Header, payload []byte, frame *transport.Buffer) bool {
	l.adm.mu.Lock()
	ss := l.adm.streams[h.CallID]
	reset := ss != nil && ss.reset
	after := ss != nil && ss.halfClosed
	lone := ss != nil && l.lonelyLocked(ss)
	l.adm.mu.Unlock()
	switch {
	case reset:
		return false // the client has been told; what crossed the RESET is dropped
	case ss == nil && l.refusedIDs.has(h.CallID):
		return false // as for a RESET: the refusal crossed it
	case ss == nil:
		l.notOpen(h)
		return false
	case after:
		l.streamError(ss, status.New(codes.Internal, "message after half-close"))
		return false
	case len(payload) > l.s.opts.maxRecvSize:
		l.streamError(ss, status.Newf(codes.ResourceExhausted, "received message of %d bytes is larger than the limit (%d)", len(payload), l.s.opts.maxRecvSize))
		return false
	}
	msg := takeMessage(frame)
	cost := conn.MessageCost(len(payload))
	l.held.Add(int64(cost))
	first := lone && ss.skipLend.Allow() && !ss.in.Queued()
	if ss != l.ownReader {
		l.streamHandoffs.Add(1) // before the handler can have it
	}
	// A lend follows (endLend) where the handler found nothing queued
	// (first), or reads for itself; lendMu is held until it is decided,
	// so that a handler woken by the push waits for it rather than miss
	// it (readOwn).
	lend := lone && (first || ss == l.ownReader)
	if lend {
		ss.lendMu.Lock()
		ss.lending.Store(true)
	}
	switch ss.in.Push(msg, cost) {
	case conn.PastWindow:
		l.held.Add(-int64(cost))
		putMessage(msg)
		if lend {
			ss.lending.Store(false)
			ss.lendMu.Unlock()
		}
		l.streamError(ss, status.New(codes.Internal, "flow control: the client sent past the stream's window"))
		return false
	case conn.PushEnded: // the handler returned meanwhile
		l.held.Add(-int64(cost))
		putMessage(msg)
		if lend {
			ss.lending.Store(false)
			ss.lendMu.Unlock()
		}
		return false
	}
	if lend {
		// Decided once the frame is dispatched (endLend): by the
		// reader, made only when the handler found nothing queued
		// (first); by the handler reading for itself, always.
		l.lendTo, l.lendFirst = ss, first
	}
	return true
}

// The reading lent to a lone stream's handler: when a MESSAGE comes for a
// stream alone on its connection (no other stream, no call) and finds its
// inbox empty, the reader lends the connection's reading to the stream's
// handler once the frame is dispatched, and stops reading (readTurn
// returns, the goroutine becomes a worker). The handler's next RecvMsg
// that finds nothing queued reads the connection itself (readOwn), so a
// ping-pong's next message costs no hand-off from a reader goroutine to
// the handler: the server side of what a lone client stream does with the
// read turn (clientstream.go's readOwn). While the handler runs, nobody
// reads: as for a unary call run unread (serverturn.go), the lend is a run
// of the connection's unread time, so the first frame to arrive meanwhile,
// or the connection's end, hands the reading on at once (to a worker, or a
// goroutine of its own), and the reader always reads. The handler hands
// the reading on the same way when a frame for anything else comes, or
// when it returns.

// endLend decides the lend streamMessage prepared (lendTo, whose lendMu
// it holds): made when lend and lendReading allow it. It reports whether it
// was made. The reader's.
func (l *serverLink) endLend(lend bool) bool {
	ss := l.lendTo
	l.lendTo = nil
	ok := lend && l.lendReading(ss)
	ss.lending.Store(false)
	ss.lendMu.Unlock()
	return ok
}

// lendReading lends the reading to ss, whose handler a frame just
// dispatched gave a message; it reports false, lending nothing, when the
// handler has returned, the transport does not report arrivals or a frame
// waits already. The reader's, with ss.lendMu held, and the last thing it
// does as the reader when true.
func (l *serverLink) lendReading(ss *serverStream) bool {
	if ss.returning {
		return false
	}
	n, ok := l.adm.unread.Start()
	if !ok {
		return false
	}
	ss.readRun.Store(n)
	return true
}

// lonelyLocked reports whether ss is alone on its connection: no other stream
// and no call. Called with l.adm.mu held.
func (l *serverLink) lonelyLocked(ss *serverStream) bool {
	return len(l.adm.streams) == 1 && len(l.adm.calls) == 0 && l.adm.streams[ss.id] == ss
}

// takeLent ends the handler's lend of the reading (readRun): it reports
// whether the handler now holds the reading, which is then its to read with
// or to hand on; false: it had none, or an arrival handed it on already.
func (ss *serverStream) takeLent() bool {
	n := ss.readRun.Swap(0)
	if n == 0 {
		return false
	}
	u := &ss.l.adm.unread
	u.Answered(n)
	if !u.Reading(n) {
		ss.skipLend.Start()
		return false
	}
	return true
}

// readOwn reads the connection on the handler's goroutine, when the
// reading is lent to it and nothing is queued, until a message for the
// stream is queued (the reading then lent to it again by streamMessage),
// the stream ends, or a frame for anything else comes (the reading is
// then handed on, and a call that frame admitted goes to a worker).
func (ss *serverStream) readOwn() {
	lent := ss.readRun.Load() != 0
	if !lent && ss.lending.Load() {
		// The reader is lending the reading now, after the push that
		// woke this handler: the lock waits for its decision.
		ss.lendMu.Lock()
		lent = ss.readRun.Load() != 0
		ss.lendMu.Unlock()
	}
	if !lent || ss.in.Settled() || !ss.takeLent() {
		return
	}
	l := ss.l
	l.ownReader = ss
	l.ownReading.Add(1)
	lentAgain := false
	for {
		b, err := l.RecvFrame(ss.recvCtx)
		if err != nil || !l.dispatch(b) {
			if l.lendTo != nil {
				l.endLend(false)
			}
			break // the reader handed on to sees the end, and finishes the link
		}
		if st := l.adm.inline; st != nil {
			l.adm.inline = nil
			l.s.workers.run(l, st)
			break
		}
		if l.lendTo != nil {
			// A message for the stream (lone): the reading is lent to
			// the handler again, unless the next frame has come
			// already: the client sends without waiting for answers
			// (a flood), where a reader reading beside the handler
			// keeps both busy. It then goes to a worker, and the
			// stream is lent no reading for a while.
			l.ownReader = nil // lent, the reading may be a worker's at once
			if lentAgain = l.endLend(true); !lentAgain {
				ss.skipLend.Start()
			}
			break
		}
		if ss.in.Settled() {
			break
		}
		l.adm.mu.Lock()
		lone := l.lonelyLocked(ss)
		l.adm.mu.Unlock()
		if !lone {
			break
		}
	}
	l.ownReader = nil
	l.ownReading.Add(-1)
	if !lentAgain {
		l.adm.unread.handOn()
	}
}

// giveReadingBack hands the reading on when the handler returns holding it.
func (ss *serverStream) giveReadingBack() {
	ss.lendMu.Lock() // a lend being made is decided first, and no other follows
	ss.returning = true
	ss.lendMu.Unlock()
	ss.giveReadingOn()
}

// giveReadingOn hands the reading lent to the handler on, if it still
// holds it.
func (ss *serverStream) giveReadingOn() {
	if ss.takeLent() {
		ss.l.adm.unread.handOn()
	}
}

// release gives back cost window bytes of messages held and now read or
// dropped: to the connection's bound, and to the client's connection
// window.
func (l *serverLink) release(cost int) {
	if cost > 0 {
		l.held.Add(-int64(cost))
		l.ConnFree(cost)
	}
}

// notOpen answers a data frame for a stream the server does not have: one
// RESET and one log line per stream, however many of its frames were in
// flight (a client streams on until it hears of the stream's end, so a
// burst of them is normal). It never closes the connection.
func (l *serverLink) notOpen(h wire.Header) bool {
	if h.CallID == l.lastNotOpen {
		return true
	}
	l.lastNotOpen = h.CallID
	l.s.peerLog.warn("frame for a stream that is not open", zap.Stringer("peer", l.peer.Addr), zap.Stringer("kind", h.Kind), zap.Uint64("stream", h.CallID))
	// Dropped when the queue is full: the client gave the stream up, or
	// will on the server's TRAILERS or RESET already on its way.
	l.QueueControl(wire.AppendReset(nil, h.CallID, uint32(codes.Internal), fmt.Sprintf("stream %d is not open", h.CallID)), l.peerCtlLimit())
	return true
}

// streamError resets ss because the client broke the stream's rules: one
// log line, a RESET that says why, and the handler sees st. Other streams
// and calls go on.
func (l *serverLink) streamError(ss *serverStream, st *status.Status) bool {
	l.s.peerLog.warn("resetting a stream", zap.Stringer("peer", l.peer.Addr), zap.Uint64("stream", ss.id), zap.String("method", ss.method), zap.String("reason", st.Message()))
	l.adm.mu.Lock()
	ss.reset = true
	l.adm.uncountLocked(&ss.counted) // before the RESET can reach the client
	l.adm.mu.Unlock()
	ss.cancel() // before RecvMsg fails, as for a client's RESET
	l.release(ss.in.Fail(st.Err()))
	return l.queueOrClose(wire.AppendReset(nil, ss.id, uint32(st.Code()), st.Message()))
}

// run runs the handler and ends the stream with its outcome.
func (ss *serverStream) run() {
	l := ss.l
	defer l.wg.Done()
	err := ss.call()
	ss.giveReadingBack()
	l.chzCallEnded(err)
	l.release(ss.in.Fail(io.EOF))
	ss.cancel()
	l.adm.mu.Lock()
	reset := ss.reset
	l.adm.uncountLocked(&ss.counted) // before the TRAILERS can reach the client
	l.adm.mu.Unlock()
	if !reset && l.Ctx.Err() == nil && ss.trailersSent.CompareAndSwap(false, true) {
		ss.sendTrailers(err)
	}
	if ss.sc.stats != nil {
		ss.sc.stats.end(err, nil)
	}
	// Only now is the stream not open: frames that crossed the end are
	// dropped until the TRAILERS have left, so no "not open" RESET can
	// overtake them.
	l.adm.mu.Lock()
	delete(l.adm.streams, ss.id)
	l.adm.mu.Unlock()
	l.callEnded()
	l.answered()
}

// releaseLent gives back the bytes the last message RecvMsg decoded was
// lent.
func (ss *serverStream) releaseLent() {
	if ss.lent != nil {
		putMessage(ss.lent)
		ss.lent = nil
	}
}

func (ss *serverStream) call() (err error) {
	defer ss.releaseLent() // after the handler, whatever it did
	defer func() {
		if p := recover(); p != nil {
			ss.l.Log.Error("handler panicked", zap.String("method", ss.method), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			err = status.Errorf(codes.Internal, "handler for %s panicked: %v", ss.method, p)
		}
	}()
	if ss.ctx.Err() != nil {
		return ss.ctx.Err()
	}
	if ic := ss.l.s.streamInterceptor; ic != nil && !ss.unary {
		info := &StreamServerInfo{FullMethod: ss.method, IsClientStream: ss.desc.ClientStreams, IsServerStream: ss.desc.ServerStreams}
		return ic(ss.svc.impl, ss, info, ss.desc.Handler)
	}
	return ss.desc.Handler(ss.svc.impl, ss)
}

// endEarly ends the stream with err's status while its handler still
// runs: the TRAILERS go now, and the handler's context is cancelled.
func (ss *serverStream) endEarly(err error) {
	if ss.trailersSent.CompareAndSwap(false, true) {
		ss.sendTrailers(err)
	}
	ss.cancel()
}

// sendTrailers ends the stream with err's status; the header goes with it
// when no HEADERS frame went before.
func (ss *serverStream) sendTrailers(err error) {
	l := ss.l
	st := status.Convert(err)
	var details [][]byte
	for _, d := range st.RawDetails() {
		if b, err := proto.Marshal(d); err == nil {
			details = append(details, b)
		}
	}
	ss.mu.Lock()
	ss.sc.mu.Lock()
	var header metadata.MD
	withHeader := !ss.headerSent
	if withHeader {
		header = ss.sc.header
	}
	ss.headerSent = true
	trailer := ss.sc.trailer
	ss.sc.mu.Unlock()
	ss.mu.Unlock()
	frame := wire.AppendTrailers(nil, ss.id, uint32(st.Code()), st.Message(), details, header, trailer)
	if len(frame) > l.Conn.MaxMessageSize() {
		frame = wire.AppendTrailers(frame[:0], ss.id, uint32(st.Code()), truncate(st.Message(), 1024), nil, nil, nil)
	}
	if err := l.budget.Acquire(l.Ctx, len(frame)); err != nil {
		return
	}
	defer l.budget.Release(len(frame))
	if err := l.Conn.Send(l.Ctx, frame); err != nil {
		if l.Ctx.Err() == nil {
			l.Log.Info("sending trailers failed", zap.String("method", ss.method), zap.Error(err))
		}
	} else if ss.sc.stats != nil {
		if withHeader {
			ss.sc.stats.outHeader(header, "", nil)
		}
		ss.sc.stats.outTrailer(trailer, len(frame))
	}
}

// SetHeader adds md to the header, sent with the first message or by
// SendHeader.
func (ss *serverStream) SetHeader(md metadata.MD) error {
	md, err := handlerMD(md)
	if err != nil {
		return err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.headerSent {
		return errors.New("rpc: SetHeader after the header was sent")
	}
	ss.sc.mu.Lock()
	ss.sc.header = metadata.Join(ss.sc.header, md)
	ss.sc.mu.Unlock()
	return nil
}

// SendHeader sends the header, md added, now.
func (ss *serverStream) SendHeader(md metadata.MD) error {
	if err := ss.SetHeader(md); err != nil {
		return err
	}
	return ss.sendHeader()
}

// sendHeader sends the HEADERS frame unless it went already.
func (ss *serverStream) sendHeader() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.headerSent {
		return nil
	}
	ss.headerSent = true
	ss.sc.mu.Lock()
	md := ss.sc.header
	ss.sc.sent = true
	ss.sendComp = ss.sc.comp
	ss.sc.mu.Unlock()
	frame := wire.AppendHeaders(nil, ss.id, headerWithEncoding(md, ss.sendComp))
	if err := ss.l.Conn.Send(ss.ctx, frame); err != nil {
		return ss.sendError(err)
	}
	if ss.sc.stats != nil {
		ss.sc.stats.outHeader(md, "", nil)
	}
	return nil
}

// SetTrailer adds md to the trailer, sent when the handler returns.
func (ss *serverStream) SetTrailer(md metadata.MD) {
	md, err := handlerMD(md)
	if err != nil {
		return
	}
	ss.sc.mu.Lock()
	ss.sc.trailer = metadata.Join(ss.sc.trailer, md)
	ss.sc.mu.Unlock()
}

// Context is the stream's context.
func (ss *serverStream) Context() context.Context { return ss.ctx }

// SendMsg sends m, once the client's window lets it.
func (ss *serverStream) SendMsg(m any) error {
	if err := ss.sendHeader(); err != nil {
		return err
	}
	if ss.readRun.Load() != 0 && (!ss.out.Open() || ss.l.Flow.Credit() <= 0) {
		// The send waits for the client's window update, which must be
		// read: the reading lent to the handler goes on now, not at the
		// transport's late look for a frame nobody reads.
		ss.giveReadingOn()
	}
	if !ss.out.Wait(ss.ctx.Done()) {
		return ss.sendError(ss.ctx.Err())
	}
	head := wire.AppendMessageHead(bufpool.Get(wire.HeaderLen)[:0], ss.id)
	// Counted by the send watch as responses are: a client that takes
	// nothing for ResponseTimeout is disconnected.
	ss.l.ResponseStart()
	n, err := sendFrame(ss.ctx, ss.l.Conn, sendCodec(ss.l.s.opts.codec, ss.sendComp), head, m, ss.l.s.opts.maxSendSize, ss.l.budget, &ss.l.Flow, nil)
	ss.l.ResponseDone()
	bufpool.Put(head)
	if err == nil {
		ss.l.chz.MessageSent()
	}
	if err != nil {
		if _, ok := status.FromError(err); ok && ss.ctx.Err() == nil {
			// Too large or not encodable: as in gRPC-go, the stream ends
			// now with that status, and what the handler returns later
			// is not sent.
			ss.endEarly(err)
			return err
		}
		return ss.sendError(err)
	}
	ss.out.Take(conn.MessageCost(n))
	if ss.sc.stats != nil {
		ss.sc.stats.outPayload(m, n, n+wire.HeaderLen)
	}
	return nil
}

// SendReady waits until a message sent on the server stream ss would leave
// without waiting for the client: the client's window for the stream and
// for the connection is open, and the connection's budget for unsent
// responses has room (MaxUnsentResponseBytes). A handler that reads what it
// sends from somewhere (a log, a file, a table) calls it before it reads
// the next part, so that a client that does not read has it wait holding
// nothing, and reads no more at once than about a window (64 KiB by
// default): what the server holds for the connection then stays within its
// bounds (docs/architecture.md). It returns the stream's status error once
// the stream has ended, and nil at once for a stream of another kind (a
// wrapper's that hides the context, a test double).
func SendReady(ss ServerStream) error {
	sc, err := callFromContext(ss.Context())
	if err != nil || sc.stream == nil {
		return nil
	}
	s := sc.stream
	if !s.out.Wait(s.ctx.Done()) || !s.l.Flow.Acquire(s.ctx.Done(), 0) {
		return s.sendError(s.ctx.Err())
	}
	if err := s.l.budget.Acquire(s.ctx, 1); err != nil {
		return s.sendError(err)
	}
	s.l.budget.Release(1)
	return nil
}

// sendError is what a send reports once the stream or the connection is
// over.
func (ss *serverStream) sendError(err error) error {
	if ss.ctx.Err() != nil {
		return status.FromContextError(ss.ctx.Err()).Err()
	}
	return conn.TransportStatus(err).Err()
}

// RecvMsg receives the client's next message into m; io.EOF after the
// client's half-close.
func (ss *serverStream) RecvMsg(m any) error {
	ss.releaseLent()
	ss.readOwn()
	msg, grant, err, ok := ss.in.Pop(ss.ctx.Done(), conn.PayloadCost)
	if !ok {
		return status.FromContextError(ss.ctx.Err()).Err()
	}
	if msg == nil {
		return err
	}
	ss.l.release(conn.PayloadCost(msg))
	if grant > 0 && !ss.l.SendWindow(ss.id, uint32(grant), conn.MaxQueuedCancels) {
		ss.in.Ungrant(grant)
	}
	n := len(msg)
	if lc := ss.l.s.opts.lender(ss.comp); lc != nil {
		err = lc.UnmarshalLent(msg, m)
		ss.lent = msg // until the next RecvMsg or the handler's return
	} else {
		err = decodeMsg(ss.l.s.opts.codec, ss.comp, msg, ss.l.s.opts.maxRecvSize, m)
		putMessage(msg)
	}
	if err != nil {
		return decodeError(err, "request", m)
	}
	if ss.sc.stats != nil {
		ss.sc.stats.inPayload(m, n, n+wire.HeaderLen)
	}
	return nil
}

// refusedSet remembers the last refusedKept streams the server refused, so
// that the frames a client sent on one before it heard of the refusal are
// dropped as docs/wire.md says, rather than answered "not open". It is the
// reader's, and allocates nothing until a stream is refused (which a client
// that waits for a slot never causes).
type refusedSet struct {
	ring []uint64
	next int
	ids  map[uint64]struct{}
}

const refusedKept = 1024

func (r *refusedSet) add(id uint64) {
	if r.ids == nil {
		r.ring = make([]uint64, refusedKept)
		r.ids = make(map[uint64]struct{})
	}
	if old := r.ring[r.next]; old != 0 {
		delete(r.ids, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % refusedKept
	r.ids[id] = struct{}{}
}

func (r *refusedSet) has(id uint64) bool {
	_, ok := r.ids[id]
	return ok
}
