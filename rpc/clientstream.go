package rpc

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/rpc/codes"
	"github.com/rdmarpc/rdmarpc/rpc/internal/wire"
	"github.com/rdmarpc/rdmarpc/rpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// NewStream opens a stream for a streaming method ("/pkg.Service/Method")
// through the client's stream interceptors. Nothing waits for the server:
// the stream is open once the OPEN frame has left, and what the server
// thinks of it (an unknown method, a refusal) comes back from RecvMsg.
func (cc *ClientConn) NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error) {
	if len(cc.opts.callOptions) > 0 {
		opts = append(append([]CallOption(nil), cc.opts.callOptions...), opts...)
	}
	return cc.streamer(ctx, desc, cc, method, opts...)
}

// newStream is the end of the client's stream chain.
func (cc *ClientConn) newStream(ctx context.Context, desc *StreamDesc, method string, _ *ClientConn, opts ...CallOption) (ClientStream, error) {
	ci := callInfo{maxRecvSize: cc.opts.maxRecvSize, maxSendSize: cc.opts.maxSendSize}
	for _, o := range opts {
		o.apply(&ci)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	var rs *rpcStats
	if hs := cc.opts.statsHandlers; len(hs) > 0 {
		// Tagged before the metadata is read: a handler may add some.
		ctx, rs = beginRPC(ctx, hs, nil, true, method, !ci.waitForReady, desc)
	}
	cs, err := cc.openStream(ctx, desc, method, &ci, rs)
	if err != nil && rs != nil {
		rs.end(err, nil)
	}
	return cs, err
}

// openStream opens the stream on the current link, or on a new one when
// that link stopped taking new calls before the OPEN left.
func (cc *ClientConn) openStream(ctx context.Context, desc *StreamDesc, method string, ci *callInfo, rs *rpcStats) (ClientStream, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if err := wire.CheckMD(md); err != nil {
		return nil, status.Errorf(codes.Internal, "request metadata: %v", err)
	}
	for attempt := 1; ; attempt++ {
		l, err := cc.link(ctx, ci.waitForReady)
		if err != nil {
			return nil, err
		}
		cs, err := l.open(ctx, desc, method, md, ci, rs)
		if err == nil {
			return cs, nil
		}
		if err != errNotSent {
			return nil, err
		}
		cc.forget(l, false)
		if attempt == 3 {
			return nil, l.closeStatus().Err()
		}
	}
}

// clientStream is the client's end of one stream.
type clientStream struct {
	l      *clientLink
	id     uint64
	desc   *StreamDesc
	method string
	ci     callInfo
	ctx    context.Context
	cancel context.CancelFunc
	parent context.Context // the caller's: once it is done, nobody reads the stream

	in  inbox
	out credit

	mu         sync.Mutex
	header     metadata.MD
	gotHeader  chan struct{} // closed when the header came or the stream ended
	sawHeaders bool          // a HEADERS frame came: a retry policy no longer applies
	headerDone bool
	trailer    metadata.MD
	endStatus  *status.Status // why, once ended
	done       chan struct{}  // closed when ended
	ended      bool           // trailers, a reset, the context or the link ended it
	sentClose  bool
	gotOne     bool // !ServerStreams: the one response was received
	// Messages kept past the stream's end (TRAILERS: finish without drop)
	// wait for RecvMsg until the caller abandons the stream.
	abandoned bool        // RecvMsg returned its final error, or they were dropped
	stopDrop  func() bool // stops the drop when the caller's context ends

	// nil without stats handlers. (Placed so that the struct keeps its
	// allocation size class: streams without handlers cost no more.)
	stats *rpcStats
}

// open registers a stream on l and sends its OPEN frame.
func (l *clientLink) open(ctx context.Context, desc *StreamDesc, method string, md metadata.MD, ci *callInfo, rs *rpcStats) (*clientStream, error) {
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
	}
	cs := &clientStream{l: l, desc: desc, method: method, ci: *ci, gotHeader: make(chan struct{}), done: make(chan struct{}), stats: rs}
	cs.in.init(l.cc.opts.window)
	cs.out.init()
	if rs != nil {
		rs.onConn(l.stats) // before the reader can see the stream
	}
	cs.ctx, cs.cancel = context.WithCancel(ctx)
	cs.parent = ctx
	l.mu.Lock()
	if l.draining || l.ctx.Err() != nil {
		l.mu.Unlock()
		cs.cancel()
		return nil, errNotSent
	}
	l.nextID++
	cs.id = l.nextID
	l.streams[cs.id] = cs
	l.mu.Unlock()

	var flags uint8
	if desc.ClientStreams {
		flags |= wire.FlagClientStreams
	}
	if desc.ServerStreams {
		flags |= wire.FlagServerStreams
	}
	frame := wire.AppendOpen(bufpool.Get(256)[:0], cs.id, flags, timeout, method, md)
	err := l.tc.Send(ctx, frame)
	bufpool.Put(frame)
	if err == nil {
		// A window larger than the protocol's initial one is granted
		// right after the OPEN.
		if extra := l.cc.opts.window - defaultWindow; extra > 0 {
			err = l.tc.Send(ctx, wire.AppendWindow(nil, cs.id, uint32(min(extra, wire.MaxWindowIncrement))))
		}
	}
	if err != nil {
		l.forgetStream(cs.id)
		cs.cancel()
		if errors.Is(err, transport.ErrClosed) && ctx.Err() == nil {
			return nil, errNotSent
		}
		if st := callerEnded(ctx); st != nil {
			return nil, st.Err()
		}
		return nil, transportStatus(err).Err()
	}
	if cs.stats != nil {
		cs.stats.outHeader(md, method, l.tc)
	}
	// The stream's context ends it: a cancel resets it on the server.
	context.AfterFunc(cs.ctx, cs.contextDone)
	return cs, nil
}

// forgetStream removes stream id from l; a draining link with nothing left
// closes.
func (l *clientLink) forgetStream(id uint64) {
	l.mu.Lock()
	delete(l.streams, id)
	retire := l.idleDraining()
	l.mu.Unlock()
	if retire {
		l.retire()
	}
}

// contextDone ends the stream when its context does (the caller's cancel or
// deadline, or the stream's own end): a RESET tells the server, unless the
// stream had ended anyway.
func (cs *clientStream) contextDone() {
	st := callerEnded(cs.ctx)
	if st == nil {
		st = status.New(codes.Canceled, context.Canceled.Error())
	}
	if cs.finish(st, true) {
		cs.l.queueControl(wire.AppendReset(nil, cs.id, uint32(st.Code()), st.Message()), maxQueuedCancels)
	}
}

// finish ends the stream with st (OK: io.EOF after the queued messages).
// drop throws the queued messages away (the stream failed). It reports
// whether this call ended it.
func (cs *clientStream) finish(st *status.Status, drop bool) bool {
	cs.mu.Lock()
	if cs.ended {
		cs.mu.Unlock()
		return false
	}
	cs.ended, cs.endStatus = true, st
	if !cs.headerDone {
		cs.headerDone = true
		close(cs.gotHeader)
	}
	close(cs.done)
	cs.mu.Unlock()
	var err error = io.EOF
	if st.Code() != codes.OK {
		err = st.Err()
	}
	if drop {
		cs.release(cs.dropQueued(err))
		cs.endStats()
	} else {
		cs.in.end(err)
		if cs.in.queued() {
			cs.keepUnread() // End is reported once they are read or dropped
		} else {
			cs.endStats()
		}
	}
	cs.l.forgetStream(cs.id)
	cs.cancel()
	return true
}

// release gives the bytes of dropped messages back to the link.
func (cs *clientStream) release(msgs [][]byte) {
	for _, m := range msgs {
		cs.l.held.Add(-int64(len(m)))
		bufpool.Put(m)
	}
}

// keepUnread: the stream ended with messages nobody has read yet. They wait
// for RecvMsg, counted in the link's held, until the caller abandons the
// stream as gRPC-go's ClientStream lets it: its context done (cancel or
// deadline), or RecvMsg returned a final error. Then they are dropped.
func (cs *clientStream) keepUnread() {
	stop := context.AfterFunc(cs.parent, func() {
		st := callerEnded(cs.parent)
		if st == nil {
			st = status.New(codes.Canceled, context.Canceled.Error())
		}
		cs.discard(st.Err())
	})
	cs.mu.Lock()
	if cs.abandoned {
		cs.mu.Unlock()
		stop()
		return
	}
	cs.stopDrop = stop
	cs.mu.Unlock()
}

// discard abandons an ended stream's unread messages: they are dropped,
// and when there were some RecvMsg returns err from now on. The drop
// waiting for the caller's context is stopped, so that a long-lived context
// keeps nothing of the stream.
func (cs *clientStream) discard(err error) {
	cs.mu.Lock()
	cs.abandoned = true
	stop := cs.stopDrop
	cs.stopDrop = nil
	cs.mu.Unlock()
	if stop != nil {
		stop()
	}
	cs.release(cs.in.drop(err))
	cs.endStats()
}

// endStats reports the stream's InTrailer (when it came) and End, once it
// has ended and its messages were read: as gRPC-go's, after the last
// InPayload.
func (cs *clientStream) endStats() {
	if cs.stats == nil {
		return
	}
	cs.mu.Lock()
	st, trailer, trailerLen, ended := cs.endStatus, cs.trailer, cs.stats.trailerLen, cs.ended
	cs.mu.Unlock()
	if ended {
		cs.stats.endAfterTrailer(st.Err(), trailer, trailerLen)
	}
}

func (cs *clientStream) dropQueued(err error) [][]byte {
	cs.in.mu.Lock()
	msgs := cs.in.msgs
	cs.in.msgs = nil
	cs.in.ended, cs.in.endErr = true, err
	cs.in.mu.Unlock()
	cs.in.signal()
	return msgs
}

// streamFrame routes a stream frame from the server to its stream. Frames
// for a stream the client has ended are dropped; frames for an id it never
// gave out are a protocol error.
func (l *clientLink) streamFrame(h wire.Header, body []byte, b transport.Buffer) bool {
	defer b.Release()
	l.mu.Lock()
	cs := l.streams[h.CallID]
	unknown := cs == nil && h.CallID > l.nextID
	l.mu.Unlock()
	if unknown {
		l.fatal(errors.New("the server sent a " + h.Kind.String() + " frame for a stream the client never opened"))
		return false
	}
	maxMD := l.cc.opts.maxHeaderListSize
	switch h.Kind {
	case wire.KindHeaders:
		md, err := wire.ParseHeaders(body, maxMD)
		if cs == nil {
			return true
		}
		if err != nil {
			cs.reset(streamDecodeStatus("header", err))
			return true
		}
		cs.mu.Lock()
		cs.sawHeaders = true
		first := !cs.headerDone
		if first {
			cs.header, cs.headerDone = md, true
			close(cs.gotHeader)
		}
		cs.mu.Unlock()
		if first && cs.stats != nil {
			cs.stats.inHeader(md, len(body)+wire.HeaderLen, "", nil)
		}
	case wire.KindMessage:
		if cs == nil {
			return true
		}
		if len(body) > cs.ci.maxRecvSize {
			cs.reset(status.Newf(codes.ResourceExhausted, "received message of %d bytes is larger than the limit (%d)", len(body), cs.ci.maxRecvSize))
			return true
		}
		if held := l.held.Load(); held > 0 && held+int64(len(body)) > int64(l.cc.opts.connWindow) {
			cs.reset(status.Newf(codes.ResourceExhausted, "the connection holds %d bytes of unread stream messages, its limit is %d", held, l.cc.opts.connWindow))
			return true
		}
		msg := append(bufpool.Get(len(body))[:0], body...)
		switch cs.in.push(msg, messageCost(len(body))) {
		case pushed:
			l.held.Add(int64(len(msg)))
		case pastWindow:
			bufpool.Put(msg)
			l.log.Warn("resetting a stream", zap.Uint64("stream", cs.id), zap.String("reason", "the server sent past the stream's window"))
			cs.reset(status.New(codes.Internal, "flow control: the server sent past the stream's window"))
		case pushEnded:
			bufpool.Put(msg)
		}
	case wire.KindTrailers:
		if len(body) > maxMD+responseOverhead {
			if cs != nil {
				cs.reset(status.Newf(codes.ResourceExhausted, "received trailers of %d bytes, larger than the limit", len(body)))
			}
			return true
		}
		r, err := wire.ParseTrailers(body, maxMD)
		if cs == nil {
			return true
		}
		if err != nil {
			cs.reset(streamDecodeStatus("trailers", err))
			return true
		}
		cs.mu.Lock()
		first := !cs.headerDone
		if first {
			cs.header, cs.headerDone = r.Header, true
			close(cs.gotHeader)
		}
		cs.trailer = r.Trailer
		if cs.stats != nil {
			cs.stats.trailerLen = len(body) + wire.HeaderLen
		}
		cs.mu.Unlock()
		if first && cs.stats != nil {
			cs.stats.inHeader(r.Header, 0, "", nil)
		}
		cs.finish(responseStatus(r), false)
		l.freeSlot()
	case wire.KindReset:
		r, err := wire.ParseReset(body)
		if err != nil {
			l.fatal(err)
			return false
		}
		if cs != nil {
			cs.finish(status.New(codes.Code(r.Code), "stream reset by the server: "+r.Message), true)
		}
	case wire.KindWindow:
		n, err := wire.ParseWindow(body)
		if err != nil {
			l.fatal(err)
			return false
		}
		if cs != nil && !cs.out.add(n) {
			cs.reset(status.New(codes.Internal, "flow control: window updates past 2^31-1 bytes"))
		}
	default: // OPEN, CLOSE_SEND: only clients send them
		l.fatal(errors.New("server sent a " + h.Kind.String() + " frame, which only clients send"))
		return false
	}
	return true
}

func streamDecodeStatus(what string, err error) *status.Status {
	if errors.Is(err, wire.ErrMetadataTooLarge) {
		return status.Newf(codes.ResourceExhausted, "stream %s: %v", what, err)
	}
	return status.Newf(codes.Internal, "malformed stream %s: %v", what, err)
}

// reset ends the stream here with st and tells the server. A stream the
// server has ended already (by its TRAILERS) drops what is still queued:
// the caller got st from RecvMsg, its final error.
func (cs *clientStream) reset(st *status.Status) {
	if cs.finish(st, true) {
		cs.l.queueControl(wire.AppendReset(nil, cs.id, uint32(st.Code()), st.Message()), maxQueuedCancels)
		return
	}
	cs.discard(st.Err())
}

// Header waits for the server's header.
func (cs *clientStream) Header() (metadata.MD, error) {
	<-cs.gotHeader
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.header == nil && cs.ended && cs.endStatus.Code() != codes.OK && cs.trailer == nil {
		return nil, cs.endStatus.Err()
	}
	return cs.header, nil
}

// Trailer returns the server's trailer, complete once RecvMsg failed.
func (cs *clientStream) Trailer() metadata.MD {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.trailer
}

// Context is the stream's context, done when the stream ends.
func (cs *clientStream) Context() context.Context { return cs.ctx }

// CloseSend half-closes the stream.
func (cs *clientStream) CloseSend() error {
	cs.mu.Lock()
	if cs.sentClose || cs.ended {
		cs.mu.Unlock()
		return nil
	}
	cs.sentClose = true
	cs.mu.Unlock()
	if err := cs.l.tc.Send(cs.ctx, wire.AppendCloseSend(nil, cs.id)); err != nil && cs.ctx.Err() == nil {
		cs.finish(transportStatus(err), true)
	}
	return nil
}

// SendMsg sends m once the server's window lets it. When the stream has
// ended it returns io.EOF, and RecvMsg the stream's status.
func (cs *clientStream) SendMsg(m any) error {
	cs.mu.Lock()
	closed, ended := cs.sentClose, cs.ended
	cs.mu.Unlock()
	if closed {
		return status.Error(codes.Internal, "SendMsg called after CloseSend")
	}
	if ended || !cs.out.wait(cs.done) {
		return io.EOF
	}
	head := wire.AppendMessageHead(bufpool.Get(wire.HeaderLen)[:0], cs.id)
	n, err := sendFrame(cs.ctx, cs.l.tc, cs.l.cc.opts.codec, head, m, cs.ci.maxSendSize, nil)
	bufpool.Put(head)
	if err != nil {
		if _, ok := status.FromError(err); ok && cs.ctx.Err() == nil {
			return err // too large or not encodable: nothing was sent
		}
		if cs.ctx.Err() == nil {
			cs.finish(transportStatus(err), true)
		}
		return io.EOF
	}
	cs.out.take(messageCost(n))
	if cs.stats != nil {
		cs.stats.outPayload(m, n, n+wire.HeaderLen)
	}
	return nil
}

// RecvMsg receives the next message into m: io.EOF at the end of an OK
// stream, the status error otherwise.
func (cs *clientStream) RecvMsg(m any) error {
	err := cs.recv(m)
	if err != nil || cs.desc.ServerStreams {
		return err
	}
	// One response only: the stream must end right after it.
	if cs.gotOne {
		return status.Error(codes.Internal, "RecvMsg called again on a stream with one response")
	}
	cs.gotOne = true
	switch err := cs.recv(nil); {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	}
	cs.reset(status.New(codes.Internal, "cardinality violation: more than one response on a client-streaming method"))
	return status.Error(codes.Internal, "cardinality violation: more than one response on a client-streaming method")
}

// recv takes the next message into m (m nil: take it, decode nothing).
func (cs *clientStream) recv(m any) error {
	msg, grant, err, _ := cs.in.pop(nil, payloadCost)
	if msg == nil {
		// The final error: nothing is queued, and nothing will be.
		cs.discard(err)
		return err
	}
	cs.l.held.Add(-int64(len(msg)))
	if grant > 0 && !cs.l.queueControl(wire.AppendWindow(nil, cs.id, uint32(grant)), maxQueuedCancels) {
		cs.in.ungrant(grant)
	}
	if m != nil {
		err = cs.l.cc.opts.codec.Unmarshal(msg, m)
	}
	n := len(msg)
	bufpool.Put(msg)
	if err != nil {
		st := status.Newf(codes.Internal, "decoding response into %T: %v", m, err)
		cs.reset(st)
		return st.Err()
	}
	if cs.stats != nil && m != nil {
		cs.stats.inPayload(m, n, n+wire.HeaderLen)
	}
	return nil
}
